package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// CheckEvery is how often a running vendor checks the cluster again.
const CheckEvery = 5 * time.Second

// Wait bounds for asking the other vendors: at most peerWait in all, and at
// least peerGrace for vendors this one does not know to hold a worker ID.
// After a claim the question waits aloneGrace for those: a vendor that
// holds the same worker ID elsewhere is one this vendor cannot know of (in
// another JetStream, or holding it in a store that has since gone back and
// still reconnecting, which nats.go does every second), and its answer may
// be slow on a loaded host; missing it would repeat IDs until the next
// check, while waiting costs each claim that long once (at most a quarter
// of the lease TTL, which the first renewal waits for).
const (
	peerWait   = 300 * time.Millisecond
	peerGrace  = 30 * time.Millisecond
	aloneGrace = 1500 * time.Millisecond
)

// Config configures a Guard. Every field but Logger and Local is required.
type Config struct {
	// Terms are what this vendor vends by (Segments is filled in from
	// Store), Kind its store's kind, Self its instance name.
	Terms Terms
	Kind  string
	Self  string
	// Lease is the configuration of every claim (kv.Claim); the Guard
	// fills in the clock check's results.
	Lease kv.LeaseConfig
	// MaxSkew is LEAF_CLOCK_MAX_SKEW: how far this clock may be from the
	// NATS server's and the live peers' before a claim.
	MaxSkew time.Duration
	// JS is the vendor's JetStream (leases, contract), Contracts the
	// contract's bucket, Store the segment store.
	JS        kv.JS
	Contracts *kv.Contracts
	Store     segment.AdminStore
	// Conn is the service's connection, on which the vendors ask each
	// other (PeersSubject of Prefix), answering inboxes of Replies only.
	Conn    *nats.Conn
	Prefix  string
	Replies *vending.Replies
	Logger  *slog.Logger
	// Local, when set, says why the vendor's own embedded store cannot be
	// vended from (storedir.Watch): both gates stay shut while it does.
	// Optional: nil with LEAF_NATS_URL.
	Local Local
}

// Local is the vendor's embedded store as the gates see it.
type Local interface {
	// Err returns why the store cannot be vended from, nil while it can.
	Err() error
}

// localErr is a gate's refusal for an embedded store that is gone: a 503
// that still wraps what the store said.
type localErr struct{ err error }

func (e localErr) Error() string   { return e.err.Error() }
func (e localErr) Unwrap() []error { return []error{e.err, vending.ErrUnavailable} }

// Guard holds a vendor to the cluster: the contract, its segment store and
// the live vendors it can see, checked at Open and every CheckEvery after,
// and before every worker-ID claim (Claim). Each check gathers an
// Observation and steps a Core with it: the decisions are the Core's, the
// I/O is the Guard's. A disagreement waiting cannot fix ends the Guard
// (Done, Err); one it can shuts a gate (SnowflakeErr, SegmentsErr).
type Guard struct {
	cfg   Config
	log   *slog.Logger
	clock snowflake.Clock
	asker *Asker
	resp  *responder
	self  selfWorker // the worker ID held, as the holder Claim handed out reports it

	mu     sync.Mutex // guards the fields below
	core   *Core
	note   string            // why the last check could not complete
	logged string            // the last refusal or note logged, so each is logged once
	unseen map[int]time.Time // held worker IDs no answering peer holds, since when
	blind  string            // which held worker IDs no peer has answered for over a TTL
	nblind int               // how many

	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// selfWorker is the worker ID this vendor holds, as it tells the others:
// the holder Claim hands out keeps it up to date.
type selfWorker struct {
	mu sync.Mutex
	w  PeerWorker
}

func (s *selfWorker) get() PeerWorker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w
}

func (s *selfWorker) set(w PeerWorker) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

// renewed notes a renewal's outcome: a new deadline, or the worker ID lost.
func (s *selfWorker) renewed(deadline time.Time, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		s.w.Deadline = deadline
	case errors.Is(err, lease.ErrLost):
		s.w.Held = false
	}
}

func (s *selfWorker) released() {
	s.mu.Lock()
	s.w.Held = false
	s.mu.Unlock()
}

// Open checks the cluster at once (no worker ID may be claimed against a
// contract it breaks), starts answering the other vendors, and checks again
// every CheckEvery until Close.
func Open(ctx context.Context, cfg Config) (*Guard, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Guard{cfg: cfg, log: cfg.Logger, clock: cfg.Lease.Clock, done: make(chan struct{}),
		core: NewCore(cfg.Terms, cfg.Kind, cfg.Self, cfg.Lease.TTL), unseen: map[int]time.Time{}}
	if g.clock == nil {
		g.clock = snowflake.SystemClock{}
	}
	g.asker = NewAsker(cfg.Conn, cfg.Prefix, cfg.Self, cfg.Logger)
	if err := g.check(ctx); err != nil {
		return nil, err
	}
	resp, err := respond(cfg.Conn, cfg.Prefix, cfg.Replies, cfg.Logger, g.peer)
	if err != nil {
		return nil, err
	}
	g.resp = resp
	lctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	go func() {
		defer close(g.done)
		g.err = g.run(lctx)
	}()
	return g, nil
}

// Close stops the checks and the answers, and waits for them.
func (g *Guard) Close(ctx context.Context) error {
	g.cancel()
	select {
	case <-g.done:
	case <-ctx.Done():
		return fmt.Errorf("cluster: guard still checking at close: %w", ctx.Err())
	}
	return g.resp.close()
}

// Done is closed when the Guard stops; Err says why.
func (g *Guard) Done() <-chan struct{} { return g.done }

// Err is the disagreement that stopped the Guard, once Done is closed; nil
// after Close.
func (g *Guard) Err() error {
	select {
	case <-g.done:
		return g.err
	default:
		return nil
	}
}

func (g *Guard) run(ctx context.Context) error {
	t := time.NewTicker(CheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := g.check(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// check is one pass: observe, step the core, carry out its decisions. It
// returns only errors waiting cannot fix.
func (g *Guard) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, CheckEvery)
	defer cancel()
	step := func(o Observation) Decision {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.core.Step(o)
	}
	d := Pass(g.observe(ctx), step, func(c kv.Contract, rev uint64) ContractReading { return g.write(ctx, c, rev) })
	for _, l := range d.Logs {
		g.log.Log(ctx, l.Level, l.Msg, l.Args...)
	}
	switch {
	case d.Fatal != nil:
		return d.Fatal
	case d.Write == nil:
		g.settle(d.Note)
	}
	return nil
}

// observe reads the store's identity, the contract and the live peers.
func (g *Guard) observe(ctx context.Context) Observation {
	o := Observation{Now: g.clock.Now()}
	info, err := g.cfg.Store.Info(ctx)
	o.Store = StoreReading{Info: info, Err: err, Refused: errors.Is(err, segment.ErrRefused)}
	if err != nil && g.cfg.Kind == KindKV {
		if _, berr := g.cfg.JS.KeyValue(ctx, g.cfg.JS.Segments); errors.Is(berr, jetstream.ErrBucketNotFound) {
			o.Store.Gone = true
		}
	}
	self := g.self.get()
	own := -1
	if self.Held {
		own = self.ID
	}
	replies, held, err := g.askPeers(ctx, own, peerGrace)
	o.PeersErr = err
	for _, r := range replies {
		o.Peers = append(o.Peers, r.Peer)
	}
	self = g.self.get()
	o.Self = Holding{ID: self.ID, Held: self.Held, Where: self.Where}
	g.see(o.Now, held, o.Peers)
	rec, rev, err := g.cfg.Contracts.Get(ctx)
	o.Contract = ContractReading{Rec: rec, Rev: rev, Err: err}
	return o
}

// askPeers asks the live vendors, expecting an answer from the holder of
// every held worker ID but own (this vendor's, -1 for none), waiting at
// least grace for the others, and returns the IDs held.
func (g *Guard) askPeers(ctx context.Context, own int, grace time.Duration) ([]Reply, map[int]bool, error) {
	held, err := kv.HeldWorkerIDs(ctx, g.cfg.JS)
	if err != nil {
		held = map[int]bool{}
	}
	expect := len(held)
	if held[own] {
		expect--
	}
	replies, err := g.asker.Ask(ctx, max(peerWait, grace), grace, expect, g.clock)
	if errors.Is(err, ErrPeersDenied) {
		return nil, held, nil // the Asker has said so
	}
	return replies, held, err
}

// write records the contract a decision asks for and returns what it left.
func (g *Guard) write(ctx context.Context, c kv.Contract, rev uint64) ContractReading {
	if rev == 0 {
		rec, rev, err := g.cfg.Contracts.Record(ctx, c)
		return ContractReading{Rec: rec, Rev: rev, Err: err, Wrote: true}
	}
	rev, err := g.cfg.Contracts.Replace(ctx, c, rev)
	return ContractReading{Rec: c, Rev: rev, Err: err, Wrote: true}
}

// settle records why the check could not complete ("" when it did), and
// logs each new refusal and note once.
func (g *Guard) settle(note string) {
	g.mu.Lock()
	g.note = note
	refusals := []error{g.core.Snowflake(), g.core.Segments()}
	g.mu.Unlock()
	for _, err := range refusals {
		if err != nil && err != ErrUnchecked && g.logOnce(err.Error()) {
			g.log.Error("refusing requests while this lasts", ErrAttr(err))
		}
	}
	if note != "" && g.logOnce(note) {
		g.log.Warn("cluster check incomplete; retrying", "err", note, "retry_in", CheckEvery)
	}
}

// logOnce reports whether msg differs from the last one logged.
func (g *Guard) logOnce(msg string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if msg == g.logged {
		return false
	}
	g.logged = msg
	return true
}

// see notes which held worker IDs no answering peer holds: a vendor that
// holds one for longer than a lease TTL renews it, so it is alive, and this
// vendor cannot see it.
func (g *Guard) see(now time.Time, held map[int]bool, peers []Peer) {
	answered := map[int]bool{}
	for _, p := range peers {
		if p.Worker.Held {
			answered[p.Worker.ID] = true
		}
	}
	self := g.self.get()
	g.mu.Lock()
	defer g.mu.Unlock()
	ttl := max(g.cfg.Lease.TTL, self.LeaseTTL)
	var blind []string
	for id := range g.unseen {
		if !held[id] || answered[id] {
			delete(g.unseen, id)
		}
	}
	for id := range held {
		if answered[id] || (self.Held && id == self.ID) {
			continue
		}
		since, ok := g.unseen[id]
		if !ok {
			g.unseen[id] = now
		} else if now.Sub(since) > ttl {
			blind = append(blind, fmt.Sprint(id))
		}
	}
	slices.Sort(blind)
	was := g.blind
	g.blind, g.nblind = "", len(blind)
	if len(blind) > 0 {
		g.blind = fmt.Sprintf("cannot see the vendors holding worker IDs %s for over a lease TTL (NATS refuses them %s, they run an older version, or they are in another account)",
			strings.Join(blind, " "), PeersSubject(g.cfg.Prefix))
	}
	switch {
	case g.blind != "" && g.blind != was:
		g.log.Warn("this vendor cannot see some of the vendors that hold worker IDs: the checks that rest on them (clock skew, who vends with which worker ID, which store) miss them", "why", g.blind)
	case g.blind == "" && was != "":
		g.log.Info("this vendor sees every vendor that holds a worker ID again")
	}
}

// peer is this vendor as it answers the others.
func (g *Guard) peer() Peer {
	self := g.self.get()
	g.mu.Lock()
	defer g.mu.Unlock()
	return Peer{V: peerVersion, Instance: g.cfg.Self, Now: g.clock.Now().UTC(), Terms: g.core.Want(),
		SegmentsRefused: g.core.Segments() != nil, Worker: self}
}

// SnowflakeErr returns why snowflake claims and requests are refused, or
// nil.
func (g *Guard) SnowflakeErr() error { return g.gate(g.core.Snowflake) }

// SegmentsErr returns why segment requests are refused, or nil.
func (g *Guard) SegmentsErr() error { return g.gate(g.core.Segments) }

// gate is a gate's refusal; while unchecked it says what the last check
// could not find out.
func (g *Guard) gate(f func() error) error {
	if g.cfg.Local != nil {
		if err := g.cfg.Local.Err(); err != nil {
			return localErr{err}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	err := f()
	if err == ErrUnchecked && g.note != "" {
		return Unsure(ErrUnchecked.Error() + ": " + g.note)
	}
	return err
}

// Status is the Guard's view, for the status page and /readyz.
type Status struct {
	Terms Terms
	// Note is why the last check could not complete; Blind names the
	// vendors holding worker IDs that this one cannot see.
	Note, Blind string
	// Unseen counts the worker IDs held by vendors this one has not seen
	// for over a lease TTL.
	Unseen int
	// SegmentsRefused and SnowflakeRefused say why each kind of request is
	// refused.
	SegmentsRefused, SnowflakeRefused string
	// LeaseTTL is the TTL of the worker-ID lease held last, 0 before one.
	LeaseTTL time.Duration
}

// Status returns the Guard's view.
func (g *Guard) Status() Status {
	s := Status{}
	if err := g.SegmentsErr(); err != nil {
		s.SegmentsRefused = err.Error()
	}
	if err := g.SnowflakeErr(); err != nil {
		s.SnowflakeRefused = err.Error()
	}
	s.LeaseTTL = g.self.get().LeaseTTL
	g.mu.Lock()
	defer g.mu.Unlock()
	s.Terms, s.Note, s.Blind, s.Unseen = g.core.Want(), g.note, g.blind, g.nblind
	return s
}

// LeaseTTL returns the longest lease the contract says a vendor may hold.
func (g *Guard) LeaseTTL() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.core.ContractTTL()
}

// Snowflake serves src past the snowflake gate (vending.Snowflake): a
// vendor that cannot be sure its IDs are its own answers 503.
func (g *Guard) Snowflake(src vending.Snowflake) vending.Snowflake { return gatedSnowflake{src, g} }

type gatedSnowflake struct {
	vending.Snowflake
	g *Guard
}

func (s gatedSnowflake) NextRanges(dst []ids.Range, n int) ([]ids.Range, error) {
	if err := s.g.SnowflakeErr(); err != nil {
		return dst, err
	}
	return s.Snowflake.NextRanges(dst, n)
}
