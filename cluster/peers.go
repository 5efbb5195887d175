package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/inflight"
	"github.com/leaf-nats/leaf/internal/scatter"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// PeersSubject is where every vendor answers the others' questions about
// itself: <prefix>.peers. Only vendors publish there.
func PeersSubject(prefix string) string { return prefix + ".peers" }

// peerVersion is the version of Peer that vendors exchange.
const peerVersion = 1

// maxPeerBytes bounds a Peer on the wire: it carries nothing that grows
// with the tags, so a cluster of any number of tags exchanges the same.
const maxPeerBytes = 2048

// Peer is what a vendor tells the others of itself on PeersSubject: what
// their safety checks need (its clock, the terms it vends by, the worker ID
// it holds and where), and nothing that grows with its tags.
type Peer struct {
	V        int       `json:"v"`
	Instance string    `json:"instance"`
	Now      time.Time `json:"now"` // its snowflake clock when it answered
	Terms    Terms     `json:"terms"`
	// SegmentsRefused: its segment gate is shut (it serves no segments).
	SegmentsRefused bool       `json:"segments_refused,omitempty"`
	Worker          PeerWorker `json:"worker"`
}

// PeerWorker is the worker ID a vendor holds.
type PeerWorker struct {
	ID   int  `json:"id"`
	Held bool `json:"held"`
	// Deadline is when it stops vending with ID unless it renews, by its
	// clock (Peer.Now).
	Deadline time.Time `json:"deadline,omitzero"`
	// Where it holds it: the bucket and the JetStream it is in.
	Where string `json:"where,omitempty"`
	// LeaseTTL is the longest lease it holds or was configured for.
	LeaseTTL time.Duration `json:"lease_ttl_ns"`
}

// DecodePeer reads a vendor's answer and checks it; it refuses anything a
// vendor does not send.
func DecodePeer(data []byte) (Peer, error) {
	if len(data) > maxPeerBytes {
		return Peer{}, fmt.Errorf("a peer's answer of %d bytes, more than %d", len(data), maxPeerBytes)
	}
	var p Peer
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&p); err != nil || dec.More() {
		return Peer{}, fmt.Errorf("a peer's answer that is not the JSON a vendor sends: %q", shorten(data))
	}
	var errs []error
	if p.V != peerVersion {
		errs = append(errs, fmt.Errorf("version %d, not %d", p.V, peerVersion))
	}
	if p.Instance == "" || len(p.Instance) > 256 || p.Now.IsZero() {
		errs = append(errs, errors.New("no instance name or no time"))
	}
	if p.Terms.Epoch < 0 || p.Worker.LeaseTTL < 0 {
		errs = append(errs, errors.New("a negative epoch or lease"))
	}
	layout, err := snowflake.ParseLayout(p.Terms.Layout)
	if err != nil {
		errs = append(errs, err)
	}
	if p.Worker.Held && (p.Worker.ID < 0 || p.Worker.ID > layout.MaxWorkerID() || p.Worker.Deadline.IsZero()) {
		errs = append(errs, fmt.Errorf("worker ID %d held with no deadline, or outside 0-%d (layout %s)", p.Worker.ID, layout.MaxWorkerID(), p.Terms.Layout))
	}
	if err := errors.Join(errs...); err != nil {
		return Peer{}, fmt.Errorf("a peer's answer that cannot be believed: %w", err)
	}
	return p, nil
}

func shorten(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// Reply is a peer's answer, and when it was asked and answered by the
// asker's clock.
type Reply struct {
	Peer
	Sent, Arrived time.Time
}

// ErrPeersDenied is the answer of an Asker while NATS refuses its question.
var ErrPeersDenied = fmt.Errorf("%w: NATS refuses this vendor's user to publish on the vendors' safety exchange; grant it (docs/security.md, docs/nats-accounts.conf)",
	scatter.ErrRefused)

// Asker asks every live vendor about itself on PeersSubject. While NATS
// refuses the question it says so once and asks no more for a while
// (scatter.Asker).
type Asker struct {
	ask  *scatter.Asker
	self string
	log  *slog.Logger
}

// NewAsker asks on nc, leaving out the answers of self (this vendor).
func NewAsker(nc *nats.Conn, prefix, self string, log *slog.Logger) *Asker {
	return &Asker{self: self, log: log, ask: scatter.NewAsker(scatter.AskerConfig{
		Conn: nc, Subject: PeersSubject(prefix), What: "questions to the other vendors", Logger: log,
		Lost: "the clock check before a worker-ID claim compares with the NATS server's clock only, and a vendor in " +
			"another JetStream with this worker ID, or serving from another segment store, goes unnoticed",
	})}
}

// Ask asks every live vendor, and returns the answers of every one but
// this vendor that arrive within wait, in clock's time; it returns early
// once expect of them have answered (the vendors known to hold worker IDs)
// and at least grace has passed (for those it does not know of). Answers
// that cannot be believed are left out and logged. It returns
// ErrPeersDenied while NATS refuses the question.
func (a *Asker) Ask(ctx context.Context, wait, grace time.Duration, expect int, clock snowflake.Clock) ([]Reply, error) {
	var out []Reply
	q := scatter.Question{Wait: wait, Grace: grace, Enough: func() bool { return len(out) >= expect }, Clock: clock}
	err := a.ask.Ask(ctx, q, func(ans scatter.Answer) {
		p, err := DecodePeer(ans.Data)
		switch {
		case err != nil:
			a.log.Warn("a vendor's answer on the safety exchange was left out", "err", err)
		case p.Instance != a.self:
			out = append(out, Reply{Peer: p, Sent: ans.Sent, Arrived: ans.Arrived})
		}
	})
	if errors.Is(err, scatter.ErrRefused) {
		return nil, ErrPeersDenied
	}
	return out, err
}

// responder answers the others' questions about this vendor.
type responder struct {
	sub     *nats.Subscription
	replies *vending.Replies
	log     *slog.Logger

	inFlight inflight.Group // the callbacks a close waits for (Unsubscribe does not)
}

// respond subscribes on nc to PeersSubject(prefix) and answers each
// question with self(), to inboxes only.
func respond(nc *nats.Conn, prefix string, replies *vending.Replies, log *slog.Logger, self func() Peer) (*responder, error) {
	r := &responder{replies: replies, log: log}
	sub, err := nc.Subscribe(PeersSubject(prefix), func(m *nats.Msg) {
		if !r.inFlight.Enter() {
			return
		}
		defer r.inFlight.Exit()
		if why := r.replies.Why(m.Reply); why != "" {
			r.replies.Drop(r.log, m.Subject, m.Reply, why)
			return
		}
		data, err := json.Marshal(self())
		if err == nil {
			err = m.Respond(data)
		}
		if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			r.log.Warn("answering another vendor's question", "err", err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: answer on %s: %w", PeersSubject(prefix), err)
	}
	if err := nc.Flush(); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("cluster: answer on %s: %w", PeersSubject(prefix), err)
	}
	r.sub = sub
	return r, nil
}

// close stops answering and waits for a question being answered.
func (r *responder) close() error {
	r.inFlight.Stop()
	err := r.sub.Unsubscribe()
	r.inFlight.Wait()
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return err
	}
	return nil
}
