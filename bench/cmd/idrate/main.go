// Command idrate measures how many segment-style IDs per second one process
// gets, with -c goroutines taking one ID per call for -d:
//
//	idrate -mode prefetch -url nats://127.0.0.1:14222 -tag bench -c 8 -d 5s
//	idrate -mode nextval  -pg postgres://... -c 8 -d 5s
//
// prefetch takes IDs through vending.Client's prefetch buffer (one shared
// Source, as an application would use it); nextval runs SELECT nextval() on
// a Postgres sequence, prepared, over -c connections: the database doing
// the same job directly. It prints one JSON object.
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/vending"
)

type config struct {
	mode, url, tag, pg, cpuprofile string
	conc, prefetch                 int
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
	flag.StringVar(&c.mode, "mode", "prefetch", "prefetch or nextval")
	flag.StringVar(&c.url, "url", nats.DefaultURL, "NATS URL (prefetch)")
	flag.StringVar(&c.tag, "tag", "bench", "segment tag (prefetch)")
	flag.IntVar(&c.prefetch, "prefetch", 8*vending.DefaultMaxBatch, "prefetch buffer size, refilled at half (by parallel requests of the max batch)")
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

func run(c config) (*result, error) {
	var next func(ctx context.Context) (int64, error)
	switch c.mode {
	case "prefetch":
		nc, err := nats.Connect(c.url, nats.Name("leaf-bench-idrate"))
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		client, err := vending.NewClient(nc, vending.ClientConfig{Prefetch: c.prefetch, LowWater: c.prefetch / 2})
		if err != nil {
			return nil, err
		}
		defer client.Close()
		src, err := client.Segment(c.tag)
		if err != nil {
			return nil, err
		}
		next = src.Next
	case "nextval":
		conn, err := pq.NewConnector(c.pg)
		if err != nil {
			return nil, err
		}
		db := sql.OpenDB(conn)
		defer db.Close()
		db.SetMaxOpenConns(c.conc)
		db.SetMaxIdleConns(c.conc)
		if _, err := db.Exec(`CREATE SEQUENCE IF NOT EXISTS leaf_bench_seq`); err != nil {
			return nil, err
		}
		stmt, err := db.Prepare(`SELECT nextval('leaf_bench_seq')`)
		if err != nil {
			return nil, err
		}
		defer stmt.Close()
		next = func(ctx context.Context) (id int64, err error) {
			err = stmt.QueryRowContext(ctx).Scan(&id)
			return id, err
		}
	default:
		return nil, fmt.Errorf("-mode %q: use prefetch or nextval", c.mode)
	}
	// Warm up: the first refill, the connections.
	for range 2 * c.conc {
		if _, err := next(context.Background()); err != nil {
			return nil, err
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
	ctx, cancel := context.WithTimeout(context.Background(), c.d)
	defer cancel()
	var ids, errs, unordered atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range c.conc {
		wg.Go(func() {
			// Each goroutine checks that its own IDs ascend: a cheap
			// sign that the buffer hands out each ID once.
			var n, e, u, last int64
			for ctx.Err() == nil {
				id, err := next(ctx)
				switch {
				case err != nil && !errors.Is(err, context.DeadlineExceeded):
					e++
				case err == nil:
					if id <= last {
						u++
					}
					last = id
					n++
				}
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
	}, nil
}
