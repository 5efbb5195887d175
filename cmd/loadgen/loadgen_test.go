package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// counterSegments vends 1, 2, 3, ... for tag "order".
type counterSegments struct{ next int64 }

func (*counterSegments) IsStrict(string) bool                 { return false }
func (*counterSegments) HandOff(string, vending.Handing) bool { return false }
func (*counterSegments) Leans(string) bool                    { return false }

var _ vending.Segments = (*counterSegments)(nil)

func (c *counterSegments) TryTakeRanges(tag string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	if tag != "order" {
		return dst, false, &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	c.next += n
	return append(dst, ids.Range{First: c.next - n + 1, Count: n}), true, nil
}

func (c *counterSegments) TakeRanges(_ context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	rs, _, err := c.TryTakeRanges(tag, dst, n)
	return rs, err
}

// vendor starts an embedded server with an in-process vending service for
// snowflake and segment tag "order".
func vendor(t *testing.T) *server.Server {
	t.Helper()
	s := natstest.Server(t)
	g, err := snowflake.New(snowflake.Settings{WorkerID: 7})
	if err != nil {
		t.Fatal(err)
	}
	nc := natstest.Conn(t, s)
	// micro serializes requests per endpoint, so the counter needs no lock.
	svc, err := vending.Open(nc, vending.Config{Snowflake: g, Segments: &counterSegments{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	nc.Flush()
	return s
}

func runJSON(t *testing.T, args ...string) (map[string]any, int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), append([]string{"-json"}, args...), &stdout, &stderr)
	var r map[string]any
	if code != exitUsage {
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			t.Fatalf("JSON output %q: %v (stderr %s)", stdout.String(), err, stderr.String())
		}
	}
	return r, code, stderr.String()
}

func TestRunCounts(t *testing.T) {
	s := vendor(t)
	url := s.ClientURL()
	for _, tc := range []struct {
		name          string
		args          []string
		requests, ids float64
	}{
		{"snowflake", []string{"-mode", "snowflake", "-c", "8", "-n", "2000"}, 2000, 2000},
		{"segment batch", []string{"-mode", "segment", "-tag", "order", "-c", "4", "-n", "500", "-batch", "100"}, 500, 50000},
		{"prefetch", []string{"-mode", "segment", "-tag", "order", "-c", "8", "-n", "100000", "-prefetch", "1000"}, 100000, 100000},
		{"open loop", []string{"-mode", "snowflake", "-c", "4", "-n", "200", "-rate", "2000"}, 200, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, code, stderr := runJSON(t, append([]string{"-url", url, "-timeout", "10s"}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, key := range []string{"requests", "req_per_sec", "ids", "ids_per_sec", "dups", "errors",
				"errors_by_code", "p50_us", "p90_us", "p99_us", "p999_us", "p9999_us", "max_us"} {
				if _, ok := r[key]; !ok {
					t.Errorf("JSON has no %q: %v", key, r)
				}
			}
			if r["requests"] != tc.requests || r["ids"] != tc.ids || r["dups"] != 0.0 || r["errors"] != 0.0 {
				t.Fatalf("report %v; want %v requests, %v IDs, no dups or errors", r, tc.requests, tc.ids)
			}
			if p50, max := r["p50_us"].(float64), r["max_us"].(float64); p50 <= 0 || p50 > max {
				t.Fatalf("p50 %v, max %v", p50, max)
			}
		})
	}
}

func TestRunText(t *testing.T) {
	s := vendor(t)
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-url", s.ClientURL(), "-d", "200ms", "-c", "2"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"requests", "ids", "p99.99", "errors", "dups      0"} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestRunFailsOnDuplicates(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	sub, err := nc.Subscribe("leaf.snowflake", func(m *nats.Msg) { m.Respond([]byte("42")) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	r, code, stderr := runJSON(t, "-url", s.ClientURL(), "-n", "10", "-c", "2")
	if code != exitFail || r["dups"] != 9.0 || !strings.Contains(stderr, "duplicate") {
		t.Fatalf("exit %d, dups %v, stderr %q; want exit 1 and 9 dups", code, r["dups"], stderr)
	}
}

// A 404 cannot be helped by asking again: each goroutine stops at its
// first, and the run says what the service said.
func TestRunStopsAtNotFound(t *testing.T) {
	s := vendor(t)
	r, code, stderr := runJSON(t, "-url", s.ClientURL(), "-mode", "segment", "-tag", "nope", "-n", "1000", "-c", "2")
	if code != exitFail || r["errors"] != 2.0 || !strings.Contains(stderr, "add it with: vendor tags add nope") {
		t.Fatalf("exit %d, errors %v, stderr %q; want exit 1, 2 errors and the service's message", code, r["errors"], stderr)
	}
}

func TestRunCountsErrors(t *testing.T) {
	s := natstest.Server(t) // no vendor: every request finds no responders
	r, code, _ := runJSON(t, "-url", s.ClientURL(), "-n", "5", "-c", "1", "-timeout", "5s")
	if code != exitFail || r["errors"] != 5.0 || r["errors_by_code"].(map[string]any)["no_responders"] != 5.0 {
		t.Fatalf("no vendor: exit %d, report %v; want exit 1 and 5 no_responders", code, r)
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "uuid"}, "snowflake or segment"},
		{[]string{"-mode", "segment"}, "-tag"},
		{[]string{"-mode", "segment", "-tag", "a b"}, "invalid"},
		{[]string{"-tag", "order"}, "-mode segment"},
		{[]string{"-c", "0"}, "-c 0"},
		{[]string{"-n", "5", "-d", "1s"}, "not both"},
		{[]string{"-batch", "0"}, "-batch"},
		{[]string{"-rate", "-1"}, "-rate"},
		{[]string{"-prefetch", "100", "-batch", "10"}, "-batch"},
		{[]string{"-timeout", "0s"}, "-timeout"},
		{[]string{"-bogus"}, "bogus"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-check-history", "run.jsonl", "-c", "2"}, "-c with -check-history"},
		{[]string{"-check-history", "run.jsonl", "-check-order"}, "-check-order with -check-history"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), tc.args, &stdout, &stderr)
			if code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}

// The largest batch is the service's: loadgen asks it, and refuses more.
func TestBatchAboveTheServicesMax(t *testing.T) {
	s := vendor(t)
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-url", s.ClientURL(), "-batch", "10001", "-n", "1"}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "at most 10000 IDs per request (its LEAF_MAX_BATCH)") {
		t.Fatalf("exit %d, stderr %q; want 2 and the service's max batch", code, stderr.String())
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"-h"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	for _, flag := range []string{"-url", "-mode", "-tag", "-c", "-n", "-d", "-batch", "-rate", "-prefetch", "-json", "-timeout",
		"-check-order", "-history", "-check-history", "order_violations", "snowflake", "LEAF_NATS_URL"} {
		if !strings.Contains(stderr.String(), flag) {
			t.Errorf("help does not mention %s", flag)
		}
	}
}

func TestHistogramError(t *testing.T) {
	for v := uint64(0); v < 1<<20; v += 1 + v/1000 {
		i := bucket(v)
		hi := highest(i)
		if hi < v || float64(hi-v) > 0.01*float64(v)+1 {
			t.Fatalf("value %d in bucket %d with highest %d: error over 1%%", v, i, hi)
		}
		if i > 0 && highest(i-1) >= v {
			t.Fatalf("value %d belongs in an earlier bucket than %d", v, i)
		}
	}
	var h histogram
	for v := uint64(1); v <= 10000; v++ {
		h.record(v * 1000)
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := q * 10000 * 1000
		if got := float64(h.quantile(q)); got < want || got > want*1.01 {
			t.Errorf("quantile(%v) = %v, want %v within 1%%", q, got, want)
		}
	}
	if h.quantile(1) != 10000*1000 {
		t.Errorf("quantile(1) = %d, want the max", h.quantile(1))
	}
}

func TestCountDups(t *testing.T) {
	ids := make([]int64, 300000)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	ids = append(ids, 5, 77, 77)
	for _, p := range []int{1, 3, 8} {
		a := slices.Clone(ids)
		sortParallel(a, p)
		if !slices.IsSorted(a) {
			t.Fatalf("p=%d: not sorted", p)
		}
	}
	if d := countDups(ids); d != 3 {
		t.Fatalf("countDups = %d, want 3", d)
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h histogram
	b.ReportAllocs()
	v := uint64(1)
	for b.Loop() {
		h.record(v)
		v = v*6364136223846793005 + 1442695040888963407
		v >>= 30
	}
}
