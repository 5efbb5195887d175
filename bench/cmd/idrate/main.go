// Command idrate measures how many segment IDs per second one process
// gets, with -c goroutines for -d:
//
//	idrate -mode next    -url nats://... -tag bench -c 1 -d 5s  # vending.Client, prefetched, Next per ID
//	idrate -mode block   -url nats://... -tag bench -c 8 -d 5s  # prefetched, a Block of -block IDs per goroutine
//	idrate -mode binary  -url nats://... -tag bench -c 8 -d 5s  # requests of -batch IDs, binary replies
//	idrate -mode ranges  -url nats://... -tag bench -c 8 -d 5s  # requests of -batch IDs, range replies
//	idrate -mode nextval -pg postgres://... -c 8 -d 5s          # SELECT nextval() on a sequence
//
// next and block take IDs through vending.Client's prefetch buffer (one
// shared Source, as an application would use it); binary and ranges are a
// remote consumer asking one vendor for IDs and counting what the replies
// carry (binary: every ID decoded; ranges: the runs, whose IDs a consumer
// hands out with a Block); nextval is the database doing the job directly.
// It prints one JSON object.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/vending"
)

type config struct {
	mode, url, tag, pg, cpuprofile string
	conc, prefetch, batch, block   int
	d                              time.Duration
}

type result struct {
	Mode        string  `json:"mode"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	IDs         int64   `json:"ids"`
	IDsPerSec   float64 `json:"ids_per_sec"`
	Errors      int64   `json:"errors"`
	Unordered   int64   `json:"unordered"`
}

func main() {
	var c config
	flag.StringVar(&c.mode, "mode", "next", "next, block, binary, ranges or nextval")
	flag.StringVar(&c.url, "url", nats.DefaultURL, "NATS URL (prefetch)")
	flag.StringVar(&c.tag, "tag", "bench", "segment tag (prefetch)")
	flag.IntVar(&c.prefetch, "prefetch", 100_000_000, "prefetch buffer size, refilled at half by one ranges request (next, block)")
	flag.IntVar(&c.block, "block", 4096, "IDs a goroutine reserves at once (block)")
	flag.IntVar(&c.batch, "batch", vending.DefaultMaxBatch, "IDs per request (binary, ranges)")
	flag.StringVar(&c.pg, "pg", "", "Postgres DSN (nextval)")
	flag.IntVar(&c.conc, "c", 8, "goroutines")
	flag.DurationVar(&c.d, "d", 5*time.Second, "duration")
	flag.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the measured interval here")
	flag.Parse()
	r, err := run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "idrate:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(r)
}

// take gives a goroutine some IDs: how many, and how many of them did not
// ascend from the one before (each take is one goroutine's, and keeps its
// last ID).
type take func(ctx context.Context) (n, unordered int64, err error)

// ascending counts the IDs that do not ascend.
type ascending struct{ last int64 }

func (a *ascending) see(id int64) int64 {
	bad := int64(0)
	if id <= a.last {
		bad = 1
	}
	a.last = id
	return bad
}

// nextBatch is how many IDs a take of the in-process modes hands out: the
// loop around it and its stop check cost nothing per ID.
const nextBatch = 1024

func run(c config) (*result, error) {
	newTake, closeTakes, err := takes(c)
	if err != nil {
		return nil, err
	}
	defer closeTakes()
	ts := make([]take, c.conc)
	for i := range ts {
		ts[i] = newTake()
	}
	// Warm up: the first refill, the connections.
	for _, t := range ts {
		for range 2 {
			if _, _, err := t(context.Background()); err != nil {
				return nil, err
			}
		}
	}
	if c.cpuprofile != "" {
		f, err := os.Create(c.cpuprofile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	return measure(c, ts), nil
}

// takes returns the maker of one goroutine's take for c.mode and what
// closes the connections they share.
func takes(c config) (func() take, func(), error) {
	switch c.mode {
	case "next", "block", "binary", "ranges":
		nc, err := nats.Connect(c.url, nats.Name("leaf-bench-idrate"))
		if err != nil {
			return nil, nil, err
		}
		client, err := vending.NewClient(nc, vending.ClientConfig{Prefetch: c.prefetch, LowWater: c.prefetch / 2, MaxBatch: max(c.batch, vending.DefaultMaxBatch)})
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		closeAll := func() { client.Close(); nc.Close() }
		src, err := client.Segment(c.tag)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		return clientTake(c, nc, src), closeAll, nil
	case "nextval":
		return nextvalTake(c)
	}
	return nil, nil, fmt.Errorf("-mode %q: use next, block, binary, ranges or nextval", c.mode)
}

// nextvalTake is -mode nextval: SELECT nextval() prepared, over c.conc
// Postgres connections.
func nextvalTake(c config) (func() take, func(), error) {
	conn, err := pq.NewConnector(c.pg)
	if err != nil {
		return nil, nil, err
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(c.conc)
	db.SetMaxIdleConns(c.conc)
	if _, err := db.Exec(`CREATE SEQUENCE IF NOT EXISTS leaf_bench_seq`); err != nil {
		db.Close()
		return nil, nil, err
	}
	stmt, err := db.Prepare(`SELECT nextval('leaf_bench_seq')`)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	newTake := func() take {
		var order ascending
		return func(ctx context.Context) (int64, int64, error) {
			var id int64
			if err := stmt.QueryRowContext(ctx).Scan(&id); err != nil {
				return 0, 0, err
			}
			return 1, order.see(id), nil
		}
	}
	return newTake, func() { stmt.Close(); db.Close() }, nil
}

// measure runs every take in its own goroutine for c.d and counts.
func measure(c config, ts []take) *result {
	ctx, cancel := context.WithTimeout(context.Background(), c.d)
	defer cancel()
	// The loop reads a flag, not ctx.Err, which takes a lock: at a few
	// nanoseconds per ID that would be most of what is measured.
	var stop atomic.Bool
	context.AfterFunc(ctx, func() { stop.Store(true) })
	var ids, errs, unordered atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, t := range ts {
		wg.Go(func() {
			var n, e, u int64
			for !stop.Load() {
				k, bad, err := t(ctx)
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					e++
				}
				n, u = n+k, u+bad
			}
			ids.Add(n)
			errs.Add(e)
			unordered.Add(u)
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	return &result{
		Mode: c.mode, Concurrency: c.conc, Seconds: el,
		IDs: ids.Load(), IDsPerSec: float64(ids.Load()) / el,
		Errors: errs.Load(), Unordered: unordered.Load(),
	}
}

// clientTake returns the takes of the modes that go through NATS.
func clientTake(c config, nc *nats.Conn, src *vending.Source) func() take {
	switch c.mode {
	// The in-process modes keep their state in locals while they loop and
	// store it once per batch: the closures of the goroutines sit side by
	// side on the heap, and writing them per ID would share cache lines
	// between cores (false sharing), measuring the machine, not the client.
	case "next":
		return func() take {
			var state ascending
			return func(ctx context.Context) (int64, int64, error) {
				order, bad := state, int64(0)
				defer func() { state = order }()
				for i := range nextBatch {
					id, err := src.Next(ctx)
					if err != nil {
						return int64(i), bad, err
					}
					bad += order.see(id)
				}
				return nextBatch, bad, nil
			}
		}
	case "block":
		return func() take {
			var state struct {
				blk   vending.Block
				order ascending
			}
			return func(ctx context.Context) (int64, int64, error) {
				blk, order, bad := state.blk, state.order, int64(0)
				defer func() { state.blk, state.order = blk, order }()
				for i := range nextBatch {
					id, ok := blk.Next()
					if !ok {
						var err error
						if blk, err = src.Block(ctx, int64(c.block)); err != nil {
							return int64(i), bad, err
						}
						id, _ = blk.Next()
					}
					bad += order.see(id)
				}
				return nextBatch, bad, nil
			}
		}
	}
	return wireTake(c, nc, src.Subject())
}

// wireTake is -mode binary and -mode ranges: requests of c.batch IDs to
// one vendor, counting what the replies carry.
func wireTake(c config, nc *nats.Conn, subject string) func() take {
	body := []byte(strconv.Itoa(c.batch))
	switch c.mode {
	case "binary":
		return func() take {
			ids := make([]int64, 0, c.batch)
			var order ascending
			msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{vending.EncodingHeader: []string{vending.EncodingBinary}}}
			return func(ctx context.Context) (int64, int64, error) {
				reply, err := nc.RequestMsgWithContext(ctx, msg)
				if err == nil {
					err = replyError(reply)
				}
				if err == nil {
					ids, err = vending.DecodeBinary(ids[:0], reply.Data)
				}
				if err != nil || len(ids) == 0 {
					return 0, 0, fmt.Errorf("binary reply: %w", err)
				}
				bad := order.see(ids[0])
				for _, id := range ids[1:] {
					bad += order.see(id)
				}
				return int64(len(ids)), bad, nil
			}
		}
	default: // ranges
		return func() take {
			rs := make([]ids.Range, 0, 4)
			var order ascending
			msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{vending.EncodingHeader: []string{vending.EncodingRanges}}}
			return func(ctx context.Context) (int64, int64, error) {
				reply, err := nc.RequestMsgWithContext(ctx, msg)
				if err == nil {
					err = replyError(reply)
				}
				if err == nil {
					rs, err = vending.DecodeRanges(rs[:0], reply.Data)
				}
				if err != nil || len(rs) == 0 {
					return 0, 0, fmt.Errorf("ranges reply: %w", err)
				}
				bad := order.see(rs[0].First)
				order.last = rs[len(rs)-1].Last()
				return ids.Count(rs), bad, nil
			}
		}
	}
}

// replyError returns the error a reply carries in its headers, if any.
func replyError(m *nats.Msg) error {
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		return fmt.Errorf("%s %s", code, m.Header.Get(micro.ErrorHeader))
	}
	return nil
}
