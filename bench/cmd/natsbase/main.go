// Command natsbase measures what a NATS user would try for IDs without
// leaf-nats, next to the segment store leaf-nats keeps in JetStream KV:
// -c clients, each with its own connection (as vendors have), taking
// -step IDs per call from one counter for -d:
//
//	natsbase -mode counter -url nats://... -c 3 -step 1   # a JetStream counter stream: Nats-Incr: +step, the ack's val is the new total
//	natsbase -mode kvcas   -url nats://... -c 3 -step 1   # a KV key holding the total: Get, then Update against its revision, retried
//	natsbase -mode leafkv  -url nats://... -c 3 -step 1   # leaf-nats's KV segment store (kvstore.Store.Alloc: a JSON row, compare-and-set)
//
// It prints one JSON object: calls and IDs per second, the latency of a
// call (p50, p99, max) and, for the compare-and-set modes, the retries.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/segment/kvstore"
)

type result struct {
	Mode      string  `json:"mode"`
	Clients   int     `json:"clients"`
	Step      int64   `json:"step"`
	Seconds   float64 `json:"seconds"`
	Calls     int     `json:"calls"`
	CallsPerS float64 `json:"calls_per_sec"`
	IDsPerSec float64 `json:"ids_per_sec"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	MaxUs     float64 `json:"max_us"`
	Retries   int64   `json:"retries"`
	Unique    bool    `json:"unique"`
}

func main() {
	mode := flag.String("mode", "counter", "counter, kvcas or leafkv")
	url := flag.String("url", nats.DefaultURL, "NATS URL (JetStream)")
	conc := flag.Int("c", 3, "clients, each with its own connection")
	step := flag.Int64("step", 1, "IDs per call")
	d := flag.Duration("d", 5*time.Second, "duration")
	flag.Parse()
	r, err := run(*mode, *url, *conc, *step, *d)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsbase:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(r)
}

// take allocates step IDs and returns the last one, with the retries it
// needed.
type take func(ctx context.Context) (last int64, retries int64, err error)

func run(mode, url string, conc int, step int64, d time.Duration) (*result, error) {
	ctx := context.Background()
	takes := make([]take, conc)
	for i := range takes {
		nc, err := nats.Connect(url, nats.Name("leaf-bench-natsbase"))
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		if takes[i], err = newTake(ctx, mode, js, nc, step); err != nil {
			return nil, err
		}
	}
	for _, t := range takes { // warm up
		if _, _, err := t(ctx); err != nil {
			return nil, err
		}
	}
	var (
		mu      sync.Mutex
		lat     []time.Duration
		lasts   []int64
		retries int64
		wg      sync.WaitGroup
	)
	dctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	for _, t := range takes {
		wg.Go(func() {
			var l []time.Duration
			var ls []int64
			var rt int64
			for dctx.Err() == nil {
				t0 := time.Now()
				last, r, err := t(ctx)
				if err != nil {
					fmt.Fprintln(os.Stderr, "natsbase:", err)
					return
				}
				l, ls, rt = append(l, time.Since(t0)), append(ls, last), rt+r
			}
			mu.Lock()
			lat, lasts, retries = append(lat, l...), append(lasts, ls...), retries+rt
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	slices.Sort(lat)
	slices.Sort(lasts)
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())
	}
	return &result{
		Mode: mode, Clients: conc, Step: step, Seconds: el, Calls: len(lat),
		CallsPerS: float64(len(lat)) / el, IDsPerSec: float64(len(lat)) * float64(step) / el,
		P50us: q(0.50), P99us: q(0.99), MaxUs: q(1), Retries: retries,
		// Each call's segment ends at a distinct total.
		Unique: len(slices.Compact(lasts)) == len(lat),
	}, nil
}

func newTake(ctx context.Context, mode string, js jetstream.JetStream, nc *nats.Conn, step int64) (take, error) {
	switch mode {
	case "counter":
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: "LEAF_BENCH_COUNTER", Subjects: []string{"leafbench.counter.>"},
			AllowMsgCounter: true, AllowDirect: true, Storage: jetstream.FileStorage,
		})
		if err != nil {
			return nil, fmt.Errorf("counter stream (nats-server 2.12 or later): %w", err)
		}
		msg := &nats.Msg{Subject: "leafbench.counter.bench", Header: nats.Header{"Nats-Incr": []string{"+" + strconv.FormatInt(step, 10)}}}
		return func(ctx context.Context) (int64, int64, error) {
			reply, err := nc.RequestMsgWithContext(ctx, msg)
			if err != nil {
				return 0, 0, err
			}
			var ack struct {
				Val   string `json:"val"`
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(reply.Data, &ack); err != nil {
				return 0, 0, err
			}
			if ack.Error != nil {
				return 0, 0, errors.New(ack.Error.Description)
			}
			v, err := strconv.ParseInt(ack.Val, 10, 64)
			return v, 0, err
		}, nil
	case "kvcas":
		b, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "LEAF_BENCH_CAS", History: 1})
		if err != nil {
			return nil, err
		}
		b.Create(ctx, "bench", []byte("0"))
		return func(ctx context.Context) (int64, int64, error) {
			var retries int64
			for {
				e, err := b.Get(ctx, "bench")
				if err != nil {
					return 0, retries, err
				}
				v, _ := strconv.ParseInt(string(e.Value()), 10, 64)
				v += step
				_, err = b.Update(ctx, "bench", []byte(strconv.FormatInt(v, 10)), e.Revision())
				if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
					retries++
					continue
				}
				return v, retries, err
			}
		}, nil
	case "leafkv":
		st, err := kvstore.New(ctx, kv.Plain(js), 1)
		if err != nil {
			return nil, err
		}
		if err := st.Create(ctx, segment.Row{Tag: "natsbase", Step: 1}); err != nil && !errors.Is(err, segment.ErrTagExists) {
			return nil, err
		}
		return func(ctx context.Context) (int64, int64, error) {
			r, err := st.Alloc(ctx, "natsbase", step, nil)
			return r.MaxID - 1, 0, err
		}, nil
	}
	return nil, fmt.Errorf("-mode %q: use counter, kvcas or leafkv", mode)
}
