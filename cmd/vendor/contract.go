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
)

// guardEvery is how often a running vendor checks the cluster contract and
// its segment store's identity again.
const guardEvery = 5 * time.Second

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
		By: instanceName(), At: time.Now().UTC(),
	}
}

// mismatchError is a recorded contract this vendor's settings disagree
// with: it names each term, both values and the setting to change.
type mismatchError struct {
	recorded kv.Contract
	diffs    []kv.Difference
	cfg      Config
}

func (e *mismatchError) Error() string {
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
// contract if none is, fills in the segment store once it knows its
// identity, and checks both again every guardEvery while the vendor runs.
// A disagreement it cannot fix by waiting ends the vendor (Done, Err).
// Segment requests pass its gate only once the store's identity matched.
type contractGuard struct {
	cfg       Config
	log       *slog.Logger
	js        jetstream.JetStream
	contracts *kv.Contracts
	store     tagStore
	kind      string

	want     kv.Contract           // Segments is "" until the store answers
	checked  bool                  // a check has completed
	segments atomic.Pointer[error] // why segment requests are refused; nil: they are not

	mu   sync.Mutex // guards note
	note string     // why the last check could not complete

	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// errUnchecked is the gate's answer until the store's identity is known.
var errUnchecked = fmt.Errorf("%w: the segment store is not yet checked against the cluster contract (is it reachable?)", segment.ErrUnavailable)

// openContractGuard checks the contract's snowflake terms at once (the
// worker ID must not be claimed against a contract it breaks), then checks
// the rest in the background.
func openContractGuard(ctx context.Context, cfg Config, log *slog.Logger, js jetstream.JetStream, contracts *kv.Contracts, store tagStore, kind string) (*contractGuard, error) {
	g := &contractGuard{cfg: cfg, log: log, js: js, contracts: contracts, store: store, kind: kind, want: cfg.contract(""), done: make(chan struct{})}
	g.segments.Store(&errUnchecked)
	if err := g.check(ctx); err != nil {
		return nil, err
	}
	gctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	go func() {
		defer close(g.done)
		g.err = g.run(gctx)
	}()
	return g, nil
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

// check is one pass; it returns only errors that waiting cannot fix.
func (g *contractGuard) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, guardEvery)
	defer cancel()
	if err := g.checkStore(ctx); err != nil {
		return err
	}
	rec, rev, err := g.contracts.Get(ctx)
	switch {
	case errors.Is(err, kv.ErrNoContract):
		if rec, rev, err = g.contracts.Record(ctx, g.want); err != nil {
			return g.transient("record the cluster contract", err)
		}
		if rec.By == g.want.By && rec.At.Equal(g.want.At) {
			level, msg := slog.LevelInfo, "cluster contract recorded"
			if g.checked {
				level, msg = slog.LevelWarn, "cluster contract missing (deleted, or the NATS store lost its JetStream state): recorded it again from this vendor's"
			}
			g.log.Log(ctx, level, msg, "bucket", kv.ClusterBucket, "epoch", rec.Epoch, "layout", rec.Layout,
				"worker_ids", rec.WorkerIDs, "segments", rec.Segments)
		}
	case err != nil:
		return g.transient("read the cluster contract", err)
	}
	if err := checkContract(rec, g.want, g.cfg); err != nil {
		return err
	}
	if rec.Segments == "" && g.want.Segments != "" {
		fill := rec
		fill.Segments, fill.By, fill.At = g.want.Segments, g.want.By, time.Now().UTC()
		if _, err := g.contracts.Replace(ctx, fill, rev); err != nil {
			return g.transient("record the segment store in the cluster contract", err)
		}
		rec = fill
	}
	if g.want.Segments != "" && rec.Segments == g.want.Segments {
		g.segments.Store(nil)
	}
	g.checked = true
	g.setNote("")
	return nil
}

// checkStore reads the store's identity: the first one becomes the one this
// vendor vends by; a different one later, or a store whose segments were
// moved, is a disagreement.
func (g *contractGuard) checkStore(ctx context.Context) error {
	info, err := g.store.Info(ctx)
	if err != nil {
		if errors.Is(err, pgstore.ErrRefused) && !g.checked {
			return err // a setting to change, before this vendor served anything
		}
		if g.kind == kindKV {
			if _, berr := g.js.KeyValue(ctx, kv.SegmentBucket); errors.Is(berr, jetstream.ErrBucketNotFound) {
				return g.storeLost(err)
			}
		}
		return g.transient("read the segment store's identity", err)
	}
	name := storeName(g.kind, info)
	switch {
	case info.MovedTo != "":
		err = fmt.Errorf("the segments of this vendor's store (%s) were moved to %s at %s: restart this vendor with that store's settings (vendor cluster show)",
			name, info.MovedTo, info.MovedAt.Format(time.RFC3339))
	case g.want.Segments == "":
		g.want.Segments = name
	case name != g.want.Segments:
		err = fmt.Errorf("the segment store changed under this vendor: it vended from %s and now reaches %s (does LEAF_POSTGRES_URL now point at another database?)",
			g.want.Segments, name)
	}
	if err != nil {
		g.segments.Store(&err)
	}
	return err
}

// storeLost reports a KV segment store whose bucket is gone: its tags and
// their max_id went with it, and creating it again would start them over.
func (g *contractGuard) storeLost(cause error) error {
	name := g.want.Segments
	if name == "" {
		name = "in KV bucket " + kv.SegmentBucket
	}
	err := fmt.Errorf("the segment store %s is gone (KV bucket %s deleted, or the NATS store lost its JetStream state: %v); its tags and their max_id went with it. "+
		"Restore the bucket, or record a new store with vendor cluster move-segments -lost, then add the tags again above the IDs they handed out (vendor tags add <tag> -start N)",
		name, kv.SegmentBucket, cause)
	g.segments.Store(&err)
	return err
}

// transient notes a check that could not complete; the next one retries.
func (g *contractGuard) transient(what string, err error) error {
	note := fmt.Sprintf("could not %s: %v", what, err)
	g.mu.Lock()
	changed := g.note != note
	g.note = note
	g.mu.Unlock()
	if changed {
		g.log.Warn("cluster contract check incomplete; retrying", "err", note, "retry_in", guardEvery)
	}
	return nil
}

func (g *contractGuard) setNote(note string) {
	g.mu.Lock()
	g.note = note
	g.mu.Unlock()
}

// segmentsErr returns why segment requests are refused, or nil.
func (g *contractGuard) segmentsErr() error {
	if p := g.segments.Load(); p != nil {
		return *p
	}
	return nil
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
	g.cancel()
	<-g.done
}
