package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/inflight"
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

// AskAgainAfter is how long an Asker whose question NATS refused waits
// before it asks again: the permission may be granted by a configuration
// reload, and each refusal is an error in the server's log.
const AskAgainAfter = time.Minute

// ErrPeersDenied is the answer of an Asker while NATS refuses its question.
var ErrPeersDenied = errors.New("no permission to ask the other vendors: NATS refuses this vendor's user to publish on the vendors' safety exchange; grant it (docs/security.md, docs/nats-accounts.conf)")

// Asker asks every live vendor about itself on PeersSubject. A request NATS
// refuses is not seen by the publisher: the server answers it with an
// asynchronous error. The Asker spots it, says so once, and does not ask
// again for AskAgainAfter, so that neither log grows.
type Asker struct {
	nc      *nats.Conn
	subject string
	self    string
	log     *slog.Logger

	mu          sync.Mutex
	deniedUntil time.Time // zero while allowed
}

// NewAsker asks on nc, leaving out the answers of self (this vendor).
func NewAsker(nc *nats.Conn, prefix, self string, log *slog.Logger) *Asker {
	return &Asker{nc: nc, subject: PeersSubject(prefix), self: self, log: log}
}

// IsDenial reports whether err is the server's refusal of an Asker's
// question: the connection's error handler leaves it to the Asker.
func IsDenial(err error, prefix string) bool {
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+PeersSubject(prefix)+`"`)
}

// Ask asks every live vendor, and returns the answers of every one but
// this vendor that arrive within wait, in clock's time; it returns early
// once expect of them have answered (the vendors known to hold worker IDs)
// and at least grace has passed (for those it does not know of). Answers
// that cannot be believed are left out and logged. It returns
// ErrPeersDenied while NATS refuses the question.
func (a *Asker) Ask(ctx context.Context, wait, grace time.Duration, expect int, clock snowflake.Clock) ([]Reply, error) {
	if a.holdingOff(clock.Now()) {
		return nil, ErrPeersDenied
	}
	inbox := a.nc.NewRespInbox()
	sub, err := a.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	before := a.nc.LastError()
	sent := clock.Now()
	if err := a.nc.PublishRequest(a.subject, inbox, nil); err != nil {
		return nil, err
	}
	start := clock.Now()
	var out []Reply
	for {
		waited := max(clock.Now().Sub(start), 0) // a clock stepped back waits no longer than wait
		left := wait - waited
		if len(out) >= expect {
			left = min(left, grace-waited)
		}
		if left <= 0 {
			break
		}
		msg, err := nextMsg(ctx, sub, left)
		if err != nil {
			break // the deadline: everyone who answers in time has
		}
		p, err := DecodePeer(msg.Data)
		switch {
		case err != nil:
			a.log.Warn("a vendor's answer on the safety exchange was left out", "err", err)
		case p.Instance != a.self:
			out = append(out, Reply{Peer: p, Sent: sent, Arrived: clock.Now()})
		}
	}
	// The server sends its refusal of the request before the PONG of this
	// flush; the connection keeps it as its last error.
	if err := a.nc.FlushTimeout(time.Second); err != nil {
		return out, nil // unknown: as if allowed
	}
	if last := a.nc.LastError(); last != before && errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), `"`+a.subject+`"`) {
		a.denied(clock.Now())
		return nil, ErrPeersDenied
	}
	a.allowed()
	return out, nil
}

func nextMsg(ctx context.Context, sub *nats.Subscription, wait time.Duration) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return sub.NextMsgWithContext(ctx)
}

func (a *Asker) holdingOff(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.deniedUntil.IsZero() && now.Before(a.deniedUntil)
}

func (a *Asker) denied(now time.Time) {
	a.mu.Lock()
	first := a.deniedUntil.IsZero()
	a.deniedUntil = now.Add(AskAgainAfter)
	a.mu.Unlock()
	if first {
		a.log.Warn("NATS refuses this vendor's questions to the other vendors: the clock check before a worker-ID claim compares with the NATS server's clock only, and a vendor in another JetStream with this worker ID, or serving from another segment store, goes unnoticed. Grant this vendor's NATS user publish on "+a.subject+" (docs/security.md)",
			"subject", a.subject, "ask_again_every", AskAgainAfter)
	}
}

func (a *Asker) allowed() {
	a.mu.Lock()
	was := !a.deniedUntil.IsZero()
	a.deniedUntil = time.Time{}
	a.mu.Unlock()
	if was {
		a.log.Info("NATS now lets this vendor ask the other vendors", "subject", a.subject)
	}
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
