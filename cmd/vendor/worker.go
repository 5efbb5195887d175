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
	"github.com/leaf-nats/leaf/snowflake"
)

// offsetClock is the system clock shifted by an offset: a test hook for
// clock faults (LEAF_TEST_CLOCK_OFFSET, and LEAF_TEST_CLOCK_OFFSET_FILE to
// step it in a running vendor). time.Time.Add keeps the monotonic reading,
// so lease deadlines stay immune to the shift.
type offsetClock struct{ d atomic.Int64 }

func (c *offsetClock) Now() time.Time        { return time.Now().Add(time.Duration(c.d.Load())) }
func (c *offsetClock) Sleep(d time.Duration) { snowflake.SystemClock{}.Sleep(d) }

// follow sets the offset from path (a Go duration such as -10s) every 20ms
// until ctx ends.
func (c *offsetClock) follow(ctx context.Context, path string, log *slog.Logger) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil && int64(d) != c.d.Load() {
				c.d.Store(int64(d))
				log.Warn("clock offset changed (test hook)", "offset", d)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// maxBackward maps LEAF_CLOCK_TOLERANCE to the generator's setting, where 0
// means the default: a tolerance of 0 waits out nothing.
func maxBackward(tolerance time.Duration) time.Duration {
	if tolerance == 0 {
		return -1
	}
	return tolerance
}

// worker holds a worker ID (a KV lease or a static ID with its file) and the
// generator that vends with it, published in slot.
type worker struct {
	cfg   Config
	js    jetstream.JetStream
	clock snowflake.Clock
	log   *slog.Logger
	slot  snowflake.Slot

	holder snowflake.Holder
	every  time.Duration
	stats  snowflake.KeepStats

	mu        sync.Mutex // guards info, clockBase and replacing the generator
	info      workerInfo
	clockBase snowflake.Stats // clock counters of generators replaced
}

// install replaces the generator (nil: none), keeping the old one's clock
// counters.
func (w *worker) install(g *snowflake.Generator) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.slot.Get(); old != nil {
		st := old.Stats()
		w.clockBase.BackwardSteps += st.BackwardSteps
		w.clockBase.BackwardRefused += st.BackwardRefused
		w.clockBase.BackwardWaited += st.BackwardWaited
	}
	w.slot.Set(g)
}

// workerInfo describes the worker ID held, for the status page.
type workerInfo struct {
	ID       int       `json:"id"`
	Mode     string    `json:"mode"` // "kv-lease" or "static"
	Where    string    `json:"where"`
	PrevLast int64     `json:"previous_last_ms"`
	Claimed  time.Time `json:"claimed"`
}

func (w *worker) workerInfo() workerInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.info
}

// claim takes a worker ID and installs a generator for it; it returns once
// the worker may vend.
func (w *worker) claim(ctx context.Context) error {
	last := int64(0)
	id, err := w.cfg.staticWorkerID()
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	lc := kv.LeaseConfig{
		TTL:      w.cfg.WorkerLeaseTTL,
		Replicas: w.cfg.KVReplicas,
		Holder:   fmt.Sprintf("%s pid %d", host, os.Getpid()),
		Clock:    w.clock,
	}
	if id >= 0 {
		// A static ID keeps its timestamp file (Leaf's local mode) and is
		// also leased in KV like any other, so that no leased worker can
		// take it while it runs, and none that starts after it repeats it.
		const horizon = 3 * time.Second
		path := w.cfg.workerFile(id)
		fh, recorded, err := snowflake.OpenFileHolder(path, w.clock, horizon)
		if err != nil {
			return err
		}
		if err := snowflake.WaitPast(ctx, w.clock, recorded, kv.DefaultMaxWait); err != nil {
			return fmt.Errorf("static worker ID %d (timestamp file %s): %w", id, path, err)
		}
		lc.First, lc.Last = id, id
		l, err := kv.Claim(ctx, w.js, lc)
		if errors.Is(err, kv.ErrNoFreeWorkerID) {
			return fmt.Errorf("LEAF_WORKER_ID %d is held by another live worker (key worker.%d in bucket %s): pin another ID, or stop that worker: %w",
				id, id, kv.WorkersBucket, err)
		}
		if err != nil {
			return fmt.Errorf("static worker ID %d: %w", id, err)
		}
		w.holder, w.every, last = snowflake.Holders{fh, l}, min(horizon, l.TTL())/3, max(recorded, l.Last())
		w.setInfo(workerInfo{ID: id, Mode: "static", Where: path + " and " + kv.WorkersBucket, PrevLast: last})
		w.log.Info("static worker ID", "worker_id", id, "timestamp_file", path, "last_ms", last)
	} else {
		l, err := kv.Claim(ctx, w.js, lc)
		if err != nil {
			return err
		}
		if l.TTL() != w.cfg.WorkerLeaseTTL {
			w.log.Warn("bucket TTL differs from LEAF_WORKER_LEASE_TTL; using the bucket's",
				"bucket", kv.WorkersBucket, "bucket_ttl", l.TTL(), "configured", w.cfg.WorkerLeaseTTL)
		}
		id, last = l.ID(), l.Last()
		w.holder, w.every = l, l.TTL()/3
		w.setInfo(workerInfo{ID: id, Mode: "kv-lease", Where: kv.WorkersBucket, PrevLast: last})
		w.log.Info("worker ID claimed", "worker_id", id, "ttl", l.TTL(), "previous_last_ms", last)
	}
	g, err := snowflake.New(snowflake.Settings{
		Epoch:       w.cfg.Epoch,
		WorkerID:    id,
		Clock:       w.clock,
		MaxBackward: maxBackward(w.cfg.ClockTolerance),
		Last:        last,
		Leased:      true,
	})
	if err != nil {
		return err
	}
	deadline, err := w.holder.Renew(ctx, last)
	if err != nil {
		return err
	}
	g.Window(deadline)
	w.stats.SetDeadline(deadline)
	w.install(g)
	return nil
}

func (w *worker) setInfo(i workerInfo) {
	i.Claimed = time.Now().UTC()
	w.mu.Lock()
	w.info = i
	w.mu.Unlock()
}

// keep renews the worker ID until ctx ends, then releases it. A lost lease is
// replaced by a new claim; in between the slot is empty and requests get 503.
func (w *worker) keep(ctx context.Context) error {
	for {
		err := snowflake.Keep(ctx, w.slot.Get(), w.holder, w.every, w.log, &w.stats)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if !errors.Is(err, snowflake.ErrLeaseLost) {
			return err
		}
		w.install(nil)
		for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
			err := w.claim(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return nil
			}
			w.log.Error("claiming a new worker ID failed; retrying", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
		}
	}
}
