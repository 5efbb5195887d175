package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/segment/pgstore"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// guardEvery is how often a running vendor checks the cluster contract and
// its segment store's identity again.
const guardEvery = 5 * time.Second

// otherJetStreamAfter is how long a vendor waits for a serving peer with
// other terms to record the missing contract before it concludes that the
// peer keeps its contract in another JetStream: long enough for a peer's
// guard to pass a few times.
const otherJetStreamAfter = 3 * guardEvery

// layout is the snowflake bit layout as the contract records it.
func layout() string {
	return fmt.Sprintf("1+%d+%d+%d", snowflake.TimeBits, snowflake.WorkerBits, snowflake.SequenceBits)
}

// storeName is the contract's name of a segment store: its kind and the
// identity it keeps in itself.
func storeName(kind string, info segment.StoreInfo) string { return kind + ":" + info.ID }

// instanceName names this vendor process: in lease values, the contract,
// its status and the cluster table.
func instanceName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// contract is the contract this vendor vends by; segments is its store's
// name, "" while unknown.
func (c Config) contract(segments string) kv.Contract {
	return kv.Contract{
		Epoch: c.Epoch, Layout: layout(), WorkerIDs: c.WorkerIDRange, Segments: segments,
		LeaseTTL: c.WorkerLeaseTTL, By: instanceName(), At: time.Now().UTC(),
	}
}

// mismatchError is a recorded contract this vendor's settings disagree
// with: it names each term, both values and the setting to change.
type mismatchError struct {
	recorded kv.Contract
	diffs    []kv.Difference
	cfg      Config
	// rerecorded: the contract this vendor had checked was lost, and
	// another vendor recorded its own settings since.
	rerecorded bool
}

func (e *mismatchError) Error() string {
	if e.rerecorded {
		return fmt.Sprintf("the cluster contract in KV bucket %s was lost and recorded again by %s at %s, with settings that differ from the ones this vendor vended by; one of the two vendors is misconfigured, and this one stops so that IDs cannot repeat:%s\n(vendor cluster show prints the contract; vendor cluster -h lists how to change it)",
			kv.ClusterBucket, e.recorded.By, e.recorded.At.Format(time.RFC3339), e.terms())
	}
	return fmt.Sprintf("this vendor's settings differ from the cluster contract in KV bucket %s (recorded by %s at %s); vendors sharing a NATS cluster must agree on it, or IDs repeat:%s\n(vendor cluster show prints the contract; vendor cluster -h lists how to change it)",
		kv.ClusterBucket, e.recorded.By, e.recorded.At.Format(time.RFC3339), e.terms())
}

// terms lists each differing term, both values and the fix, a line each.
func (e *mismatchError) terms() string {
	var b strings.Builder
	for _, d := range e.diffs {
		fmt.Fprintf(&b, "\n  %s: the cluster's is %s, this vendor's %s; %s", d.Term, d.Recorded, d.Wanted, e.fix(d))
	}
	return b.String()
}

// fix says what to set for a term.
func (e *mismatchError) fix(d kv.Difference) string {
	switch d.Term {
	case "epoch":
		return "set LEAF_EPOCH=" + d.Recorded
	case "worker IDs":
		return "set LEAF_WORKER_ID_RANGE=" + d.Recorded + ", or change the cluster's with: vendor cluster set -worker-ids " + d.Wanted
	case "segment store":
		kind, _, _ := strings.Cut(d.Recorded, ":")
		if kind == "postgres" {
			return "set LEAF_POSTGRES_URL to the cluster's database, or move the cluster's segments to this vendor's store with: vendor cluster move-segments"
		}
		return "leave LEAF_POSTGRES_URL empty (the cluster's segments are in KV bucket " + kv.SegmentBucket + "), or move them to this vendor's store with: vendor cluster move-segments"
	}
	return "this build of leaf-nats cannot join this cluster"
}

// checkContract compares want with the recorded contract, ignoring the
// segment store while want's is unknown.
func checkContract(rec, want kv.Contract, cfg Config) error {
	if want.Segments == "" || rec.Segments == "" {
		rec.Segments, want.Segments = "", ""
	}
	if diffs := rec.Diff(want); len(diffs) > 0 {
		return &mismatchError{recorded: rec, diffs: diffs, cfg: cfg}
	}
	return nil
}

// contractGuard holds this vendor to the cluster contract: it records the
// contract if none is (and again if it was lost), fills in the segment store
// once it knows its identity, and checks both, and the live vendors it can
// see, again every guardEvery while the vendor runs. A disagreement waiting
// cannot fix ends the vendor (Done, Err); one it can (a peer vending with
// the same worker ID, or from another segment store) shuts a gate instead.
// Snowflake claims and requests pass their gate once a check completed,
// segment requests theirs once the store's identity matched the contract.
type contractGuard struct {
	cfg       Config
	log       *slog.Logger
	js        jetstream.JetStream
	contracts *kv.Contracts
	store     segment.AdminStore
	kind      string
	// peers returns the status of every live vendor but this one.
	peers func(ctx context.Context) ([]status, error)
	// self returns the worker ID this vendor holds, if it holds one.
	self func() (id int, held bool)

	want        kv.Contract  // Segments is "" until the store answers
	checked     time.Time    // when a check last completed; zero before
	contractTTL atomic.Int64 // the contract's LeaseTTL, ns
	// disagreeSince is when the contract was first found missing while a
	// serving peer vends by other terms; zero when not.
	disagreeSince time.Time

	snowflake atomic.Pointer[error] // why snowflake claims and requests are refused; nil: they are not
	segments  atomic.Pointer[error] // the same for segment requests

	mu     sync.Mutex // guards the fields below
	note   string     // why the last check could not complete
	logged string     // the last refusal or note logged, so each is logged once

	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// unsure is the refusal of a vendor that cannot be sure its IDs are
// unique: the service answers it with a 503.
type unsure string

func (u unsure) Error() string      { return string(u) }
func (unsure) Is(target error) bool { return target == vending.ErrUnavailable }

// errUnchecked is a gate's answer until a check has completed.
var errUnchecked error = unsure("not yet checked against the cluster contract")

// openContractGuard checks the contract at once (no worker ID may be claimed
// against a contract it breaks); start runs the later checks.
func openContractGuard(ctx context.Context, cfg Config, log *slog.Logger, js jetstream.JetStream, contracts *kv.Contracts, store segment.AdminStore,
	peers func(context.Context) ([]status, error)) (*contractGuard, error) {
	g := &contractGuard{cfg: cfg, log: log, js: js, contracts: contracts, store: store, kind: cfg.storeKind(), peers: peers,
		self: func() (int, bool) { return 0, false }, want: cfg.contract(""), done: make(chan struct{})}
	g.snowflake.Store(&errUnchecked)
	g.segments.Store(&errUnchecked)
	if err := g.check(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// start checks every guardEvery from now on; self tells the worker ID this
// vendor holds.
func (g *contractGuard) start(self func() (int, bool)) {
	g.self = self
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	go func() {
		defer close(g.done)
		g.err = g.run(ctx)
	}()
}

func (g *contractGuard) run(ctx context.Context) error {
	t := time.NewTicker(guardEvery)
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

// check is one pass; it returns only errors that waiting cannot fix. What
// it could not find out is noted (status, /readyz, one log line) and the
// gates stay as they were.
func (g *contractGuard) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, guardEvery)
	defer cancel()
	var notes []string
	defer func() { g.setNote(strings.Join(notes, "; ")) }()
	noteErr := func(what string, err error) { notes = append(notes, fmt.Sprintf("could not %s: %v", what, err)) }

	info, err := g.store.Info(ctx)
	if err != nil {
		if errors.Is(err, pgstore.ErrRefused) && g.checked.IsZero() {
			return err // a setting to change, before this vendor served anything
		}
		if g.kind == kindKV {
			if _, berr := g.js.KeyValue(ctx, kv.SegmentBucket); errors.Is(berr, jetstream.ErrBucketNotFound) {
				return g.storeLost(err)
			}
		}
		noteErr("read the segment store's identity", err)
	}
	name := ""
	if err == nil {
		name = storeName(g.kind, info)
		switch {
		case g.want.Segments == "":
			g.mu.Lock()
			g.want.Segments = name
			g.mu.Unlock()
		case name != g.want.Segments:
			return fmt.Errorf("the segment store changed under this vendor: it vended from %s and now reaches %s (%s)", g.want.Segments, name, g.storeHint())
		}
	}
	peers, err := g.peers(ctx)
	if err != nil {
		noteErr("ask the live vendors for their settings", err)
	}

	rec, rev, err := g.contracts.Get(ctx)
	var bad *kv.CorruptError
	switch {
	case errors.Is(err, kv.ErrNoContract), errors.As(err, &bad):
		// Record this vendor's settings, unless vendors that are serving
		// run with others: then one side is misconfigured, and the vendors
		// that served by the lost contract record it again.
		if why := disagreeing(peers, g.want); why != "" {
			if g.disagreeSince.IsZero() {
				g.disagreeSince = time.Now()
			}
			if time.Since(g.disagreeSince) >= otherJetStreamAfter {
				return fmt.Errorf("no cluster contract is recorded in this JetStream, and %s; in %v that vendor did not record its own here, so it keeps it in another JetStream (another domain joined by a leaf node, or another account): vendors answering the same subjects must share one JetStream",
					why, otherJetStreamAfter)
			}
			notes = append(notes, "no cluster contract is recorded, and "+why+": this vendor records its own only once the serving vendors agree with it")
			return nil
		}
		g.disagreeSince = time.Time{}
		w := g.want
		w.At = time.Now().UTC()
		if bad != nil {
			// Written over (by hand, or by a reply sent where it should
			// not go): this vendor's terms, which it vends by, replace it.
			if rev, err = g.contracts.Replace(ctx, w, bad.Revision); err == nil {
				rec = w
			}
		} else {
			rec, rev, err = g.contracts.Record(ctx, w)
		}
		if err != nil {
			noteErr("record the cluster contract", err)
			return nil
		}
		if rec.By == w.By && rec.At.Equal(w.At) {
			level, msg := slog.LevelInfo, "cluster contract recorded"
			switch {
			case bad != nil:
				level, msg = slog.LevelWarn, "cluster contract corrupt ("+bad.Why+"): recorded it again from this vendor's"
			case !g.checked.IsZero():
				level, msg = slog.LevelWarn, "cluster contract missing (deleted, or the NATS store lost its JetStream state): recorded it again from this vendor's"
			}
			g.log.Log(ctx, level, msg, "bucket", kv.ClusterBucket, "epoch", rec.Epoch, "layout", rec.Layout,
				"worker_ids", rec.WorkerIDs, "segments", rec.Segments)
		}
	case err != nil:
		noteErr("read the cluster contract", err)
		return nil
	}
	g.contractTTL.Store(int64(rec.LeaseTTL))
	if name != "" && info.MovedTo != "" && info.MovedTo == rec.Segments {
		return fmt.Errorf("the segments of this vendor's store (%s) were moved to %s at %s: restart this vendor with that store's settings (vendor cluster show)",
			name, info.MovedTo, info.MovedAt.Format(time.RFC3339))
	}
	if err := checkContract(rec, g.want, g.cfg); err != nil {
		var m *mismatchError
		if errors.As(err, &m) && !g.checked.IsZero() && rec.Why == "" && rec.At.After(g.checked) {
			m.rerecorded = true
		}
		return err
	}
	if rec.Segments == "" && g.want.Segments != "" {
		fill := rec
		fill.Segments, fill.By, fill.At = g.want.Segments, g.want.By, time.Now().UTC()
		if _, err := g.contracts.Replace(ctx, fill, rev); err != nil {
			noteErr("record the segment store in the cluster contract", err)
			return nil
		}
		rec = fill
	}

	// The contract holds; the gates are now what the store and the peers
	// say.
	var sfErr, segErr error
	if why := g.sameWorkerID(peers); why != "" {
		sfErr = unsure(why)
	}
	switch {
	case name == "":
		if p := g.segments.Load(); p != nil { // unknown this time: as it was
			segErr = *p
		}
	case info.MovedTo != "":
		segErr = fmt.Errorf("%w: the segments of this vendor's store (%s) are sealed for a move to %s since %s, but the cluster contract still names this store: a vendor cluster move-segments was interrupted or is running; run it again to finish the move",
			segment.ErrStoreMoved, name, info.MovedTo, info.MovedAt.Format(time.RFC3339))
	default:
		if why := otherStore(peers, name); why != "" {
			segErr = unsure(why)
		}
	}
	g.setGate(&g.snowflake, sfErr)
	g.setGate(&g.segments, segErr)
	g.checked = time.Now()
	return nil
}

// storeHint says what most likely changed the store under a vendor.
func (g *contractGuard) storeHint() string {
	if g.kind == kindKV {
		return "was KV bucket " + kv.SegmentBucket + " deleted and created again, or restored from a backup?"
	}
	return "does LEAF_POSTGRES_URL now point at another database, or a restored copy of it?"
}

// sameWorkerID says which live vendor vends with the worker ID this one
// holds, "" when none.
func (g *contractGuard) sameWorkerID(peers []status) string {
	id, held := g.self()
	if !held {
		return ""
	}
	return vendingWith(peers, id)
}

// vendingWith says which of peers could vend with worker ID id when they
// answered, "" when none. Within one JetStream no two vendors can: a claim
// waits until the earlier holder's deadline has passed. Two that can are in two JetStreams
// (two domains joined by a leaf node, or buckets of their own) answering
// the same subjects, and their IDs repeat.
func vendingWith(peers []status, id int) string {
	for _, p := range peers {
		// The deadline and now are both the peer's clock's.
		if p.Worker.Held && p.Worker.ID == id && p.Worker.Deadline.After(p.Now) {
			return fmt.Sprintf("vendor %s vends with worker ID %d too, kept in %s of another JetStream (another domain joined by a leaf node, or another account?): vendors answering the same subjects must share one JetStream, or claim disjoint LEAF_WORKER_ID_RANGEs",
				p.Instance, id, p.Worker.Where)
		}
	}
	return ""
}

// otherStore says which live vendor serves segments from another store
// than name, "" when none.
func otherStore(peers []status, name string) string {
	for _, p := range peers {
		if s := p.Contract.Segments; s != "" && s != name && p.Contract.Refused == "" {
			return fmt.Sprintf("vendor %s serves the same segment subjects from %s, this one from %s: the same tags would hand out the same IDs; give both one store (vendor cluster show)",
				p.Instance, s, name)
		}
	}
	return ""
}

// disagreeing says which serving peer vends by other contract terms than
// want, "" when none does.
func disagreeing(peers []status, want kv.Contract) string {
	for _, p := range peers {
		if !p.Worker.Held || p.Contract.Epoch == 0 {
			continue
		}
		switch {
		case p.Contract.Epoch != want.Epoch:
			return fmt.Sprintf("vendor %s vends with epoch %d, this one with %d", p.Instance, p.Contract.Epoch, want.Epoch)
		case p.Contract.WorkerIDs != want.WorkerIDs:
			return fmt.Sprintf("vendor %s claims worker IDs %s, this one %s", p.Instance, p.Contract.WorkerIDs, want.WorkerIDs)
		case p.Contract.Segments != "" && want.Segments != "" && p.Contract.Segments != want.Segments:
			return fmt.Sprintf("vendor %s serves segments from %s, this one from %s", p.Instance, p.Contract.Segments, want.Segments)
		}
	}
	return ""
}

// setGate shuts a gate with err, or opens it (nil), logging each change
// once.
func (g *contractGuard) setGate(gate *atomic.Pointer[error], err error) {
	if err == nil {
		gate.Store(nil)
		return
	}
	gate.Store(&err)
	if err != errUnchecked && g.logOnce(err.Error()) {
		g.log.Error("refusing requests while this lasts", "err", err)
	}
}

// storeLost reports a KV segment store whose bucket is gone: its tags and
// their max_id went with it, and creating it again would start them over.
func (g *contractGuard) storeLost(cause error) error {
	name := g.want.Segments
	if name == "" {
		name = "in KV bucket " + kv.SegmentBucket
	}
	err := fmt.Errorf("%w: the segment store %s is gone (KV bucket %s deleted, or the NATS store lost its JetStream state: %v); its tags and their max_id went with it. "+
		"Restore the bucket, or record a new store with vendor cluster move-segments -lost, then add the tags again above the IDs they handed out (vendor tags add <tag> -start N)",
		segment.ErrUnavailable, name, kv.SegmentBucket, cause)
	g.segments.Store(&err)
	return err
}

// setNote records why the last check could not complete ("" when it did)
// and logs each new reason once.
func (g *contractGuard) setNote(note string) {
	g.mu.Lock()
	g.note = note
	g.mu.Unlock()
	if note != "" && g.logOnce(note) {
		g.log.Warn("cluster contract check incomplete; retrying", "err", note, "retry_in", guardEvery)
	}
}

// logOnce reports whether msg differs from the last one logged.
func (g *contractGuard) logOnce(msg string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if msg == g.logged {
		return false
	}
	g.logged = msg
	return true
}

// leaseTTL returns the longest lease the contract says a vendor may hold.
func (g *contractGuard) leaseTTL() time.Duration { return time.Duration(g.contractTTL.Load()) }

// snowflakeErr returns why snowflake claims and requests are refused, or
// nil.
func (g *contractGuard) snowflakeErr() error { return g.gateErr(&g.snowflake) }

// segmentsErr returns why segment requests are refused, or nil.
func (g *contractGuard) segmentsErr() error { return g.gateErr(&g.segments) }

// gateErr is a gate's refusal; while unchecked it says what the last
// check could not find out.
func (g *contractGuard) gateErr(gate *atomic.Pointer[error]) error {
	p := gate.Load()
	if p == nil {
		return nil
	}
	if *p == errUnchecked {
		if _, note := g.status(); note != "" {
			return unsure(errUnchecked.Error() + ": " + note)
		}
	}
	return *p
}

// status describes the guard for /readyz and the status page.
func (g *contractGuard) status() (segments string, note string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.want.Segments, g.note
}

// Done is closed when the guard stops; Err says why.
func (g *contractGuard) Done() <-chan struct{} { return g.done }

// Err is the disagreement that stopped the guard, once Done is closed.
func (g *contractGuard) Err() error {
	select {
	case <-g.done:
		return g.err
	default:
		return nil
	}
}

// Close stops the guard and waits for it.
func (g *contractGuard) Close() {
	if g.cancel == nil { // never started
		return
	}
	g.cancel()
	<-g.done
}
