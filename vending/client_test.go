package vending_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// counterSegments vends 1, 2, 3, ... per tag; tags it does not hold are
// unknown (404).
type counterSegments struct {
	normalTags
	mu   sync.Mutex
	next map[string]int64
}

// normalTags makes a test's Segments serve normal tags only: none is
// strict, none is handed off.
type normalTags struct{}

func (normalTags) IsStrict(string) bool                 { return false }
func (normalTags) HandOff(string, vending.Handing) bool { return false }
func (normalTags) Leans(string) bool                    { return false }

var _ vending.Segments = (*counterSegments)(nil)

func newCounterSegments(tags ...string) *counterSegments {
	c := &counterSegments{next: map[string]int64{}}
	for _, t := range tags {
		c.next[t] = 1
	}
	return c
}

func (c *counterSegments) TryTakeRanges(tag string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first, ok := c.next[tag]
	if !ok {
		return dst, false, &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	c.next[tag] = first + n
	return append(dst, ids.Range{First: first, Count: n}), true, nil
}

func (c *counterSegments) TakeRanges(_ context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	rs, _, err := c.TryTakeRanges(tag, dst, n)
	return rs, err
}

// startSegmentVendor serves the tags from a counterSegments on s.
func startSegmentVendor(t testing.TB, s *server.Server, tags ...string) {
	t.Helper()
	nc := natstest.Conn(t, s)
	svc, err := vending.Open(nc, vending.Config{Segments: newCounterSegments(tags...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	if err := nc.Flush(); err != nil { // the endpoints are subscribed before clients ask
		t.Fatal(err)
	}
}

func newClient(t testing.TB, nc *nats.Conn, cfg vending.ClientConfig) *vending.Client {
	t.Helper()
	c, err := vending.NewClient(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// responder answers subject with reply(request number, request), counting
// requests; reply returning nil sends no reply.
func responder(t testing.TB, nc *nats.Conn, subject string, reply func(n int, req *nats.Msg) *nats.Msg) *atomic.Int64 {
	t.Helper()
	var count atomic.Int64
	sub, err := nc.Subscribe(subject, func(req *nats.Msg) {
		if m := reply(int(count.Add(1)), req); m != nil {
			req.RespondMsg(m)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	nc.Flush()
	return &count
}

func errorReply(code int) *nats.Msg {
	m := nats.NewMsg("")
	m.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(code))
	m.Header.Set(micro.ErrorHeader, "test error "+strconv.Itoa(code))
	return m
}

// idsReply answers with ids, ascending, in the ranges encoding the client
// asks for.
func idsReply(want ...int64) *nats.Msg {
	var rs []ids.Range
	for _, id := range want {
		if n := len(rs); n > 0 && rs[n-1].Last()+1 == id {
			rs[n-1].Count++
			continue
		}
		rs = append(rs, ids.Range{First: id, Count: 1})
	}
	return rangesReply(rs...)
}

// rangesReply answers with rs in the ranges encoding, marked as such.
func rangesReply(rs ...ids.Range) *nats.Msg {
	m := nats.NewMsg("")
	m.Header.Set(vending.EncodingHeader, vending.EncodingRanges)
	m.Data = vending.AppendRanges(nil, rs)
	return m
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func ascendingUnique(t *testing.T, ids []int64) {
	t.Helper()
	for i, id := range ids {
		if id <= 0 || i > 0 && id <= ids[i-1] {
			t.Fatalf("IDs not positive and ascending: %v", ids)
		}
	}
}

func TestClientSnowflakeAndSegment(t *testing.T) {
	s := natstest.Server(t)
	startVendor(t, s, 1)
	startSegmentVendor(t, s, "order")
	c := newClient(t, natstest.Conn(t, s), vending.ClientConfig{})
	ctx := ctxT(t)

	id, err := c.Next(ctx)
	if err != nil || id <= 0 {
		t.Fatalf("Next = %d, %v", id, err)
	}
	for _, n := range []int{1, 5, 63, 64, 1000, vending.DefaultMaxBatch} { // text and binary
		ids, err := c.NextN(ctx, n)
		if err != nil || len(ids) != n {
			t.Fatalf("NextN(%d) = %d IDs, %v", n, len(ids), err)
		}
		ascendingUnique(t, append([]int64{id}, ids...))
		id = ids[len(ids)-1]
	}

	order, err := c.Segment("order")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.Segment("order"); again != order {
		t.Fatal("Segment(order) twice returned two sources")
	}
	if order.Subject() != "leaf.segment.order" {
		t.Fatalf("subject %q", order.Subject())
	}
	ids, err := order.NextN(ctx, 3)
	if err != nil || fmt.Sprint(ids) != "[1 2 3]" {
		t.Fatalf("NextN(3) = %v, %v", ids, err)
	}
	if id, err := order.Next(ctx); err != nil || id != 4 {
		t.Fatalf("Next = %d, %v; want 4", id, err)
	}
	if ids, err := order.NextN(ctx, 100); err != nil || ids[0] != 5 || ids[99] != 104 {
		t.Fatalf("NextN(100) = %v, %v", ids, err)
	}

	missing, err := c.Segment("missing")
	if err != nil {
		t.Fatal(err)
	}
	_, err = missing.Next(ctx)
	var verr *vending.Error
	if !errors.As(err, &verr) || verr.Code != 404 || !errors.Is(err, vending.ErrNotFound) || verr.Message == "" {
		t.Fatalf("unknown tag: %v; want a 404 *vending.Error", err)
	}
}

// A vendor that predates ranges answers in text: the client reads it.
func TestClientReadsTextReplies(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	responder(t, nc, "leaf.segment.old", func(_ int, req *nats.Msg) *nats.Msg {
		if req.Header.Get(vending.EncodingHeader) != vending.EncodingRanges {
			t.Errorf("request asks for %q", req.Header.Get(vending.EncodingHeader))
		}
		return &nats.Msg{Data: []byte("7\n8\n9\n20")}
	})
	c := newClient(t, nc, vending.ClientConfig{})
	src, err := c.Segment("old")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := src.NextRanges(ctxT(t), 4)
	if err != nil || len(rs) != 2 || rs[0] != (ids.Range{First: 7, Count: 3}) || rs[1] != (ids.Range{First: 20, Count: 1}) {
		t.Fatalf("NextRanges = %v, %v; want 7..9 and 20", rs, err)
	}
	if _, err := src.NextRanges(ctxT(t), 3); !errors.Is(err, vending.ErrBadReply) {
		t.Fatalf("3 asked, 4 sent: %v, want ErrBadReply", err)
	}
}

func TestClientRejectsLocally(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	count := responder(t, nc, "leaf.>", func(int, *nats.Msg) *nats.Msg { return idsReply(1) })
	c := newClient(t, nc, vending.ClientConfig{MaxBatch: 100})
	for _, n := range []int{0, -1, 101} {
		if _, err := c.NextN(t.Context(), n); !errors.Is(err, vending.ErrBadRequest) {
			t.Errorf("NextN(%d): %v, want ErrBadRequest", n, err)
		}
	}
	for _, tag := range []string{"", "a b", "a.*", "order.", "a..b"} {
		if _, err := c.Segment(tag); !errors.Is(err, segment.ErrInvalidTag) {
			t.Errorf("Segment(%q): %v, want ErrInvalidTag", tag, err)
		}
	}
	if n := count.Load(); n != 0 {
		t.Fatalf("%d requests sent for invalid calls", n)
	}
}

func TestNewClientValidates(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	for name, cfg := range map[string]vending.ClientConfig{
		"wildcard prefix":    {Prefix: "leaf.*"},
		"edge dot":           {Prefix: "leaf."},
		"negative timeout":   {Timeout: -time.Second},
		"backoff backwards":  {BackoffMin: time.Second, BackoffMax: time.Millisecond},
		"negative max batch": {MaxBatch: -1},
		"prefetch too big":   {Prefetch: vending.DefaultMaxRangeBatch + 1, LowWater: 10},
		"low water at size":  {Prefetch: 100, LowWater: 100},
		"negative low":       {Prefetch: 100, LowWater: -1},
	} {
		t.Run(name, func(t *testing.T) {
			if c, err := vending.NewClient(nc, cfg); err == nil {
				c.Close()
				t.Fatal("accepted")
			}
		})
	}
	if _, err := vending.NewClient(nil, vending.ClientConfig{}); err == nil {
		t.Fatal("nil connection accepted")
	}
	// Every bad field is named at once.
	_, err := vending.NewClient(nc, vending.ClientConfig{Prefix: "a b", Timeout: -1, MaxBatch: -1})
	for _, want := range []string{"prefix", "timeout", "max batch"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("three bad fields: %v; want %q named", err, want)
		}
	}
}

func TestClientRetries(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int // replies with code before a success
		code     int
		retries  int
		requests int64
		want     error // nil: success
	}{
		{"503 then success", 2, 503, 3, 3, nil},
		{"503 beyond retries", 5, 503, 2, 3, vending.ErrUnavailable},
		{"400 at once", 5, 400, 3, 1, vending.ErrBadRequest},
		{"404 at once", 5, 404, 3, 1, vending.ErrNotFound},
		{"500 at once", 5, 500, 3, 1, vending.ErrInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.Server(t)
			nc := natstest.Conn(t, s)
			count := responder(t, nc, "leaf.segment.order", func(n int, _ *nats.Msg) *nats.Msg {
				if n <= tc.failures {
					return errorReply(tc.code)
				}
				return idsReply(7)
			})
			c := newClient(t, nc, vending.ClientConfig{Retries: tc.retries, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond})
			order, _ := c.Segment("order")
			id, err := order.Next(ctxT(t))
			switch {
			case tc.want == nil && (err != nil || id != 7):
				t.Fatalf("Next = %d, %v; want 7", id, err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("Next = %d, %v; want %v", id, err, tc.want)
			}
			var verr *vending.Error
			if tc.want != nil && (!errors.As(err, &verr) || verr.Code != tc.code) {
				t.Fatalf("error %v is not a *vending.Error with code %d", err, tc.code)
			}
			if got := count.Load(); got != tc.requests {
				t.Fatalf("%d requests, want %d", got, tc.requests)
			}
		})
	}
}

func TestClientRetriesNoReply(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	c := newClient(t, nc, vending.ClientConfig{Retries: 2, Timeout: 20 * time.Millisecond,
		BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond})

	_, err := c.Next(ctxT(t))
	if !errors.Is(err, vending.ErrUnavailable) || !errors.Is(err, nats.ErrNoResponders) || !strings.Contains(err.Error(), "is one running on this NATS, with this subject prefix") {
		t.Fatalf("no responders: %v; want ErrUnavailable wrapping nats.ErrNoResponders", err)
	}

	silent := responder(t, nc, "leaf.snowflake", func(int, *nats.Msg) *nats.Msg { return nil })
	_, err = c.Next(ctxT(t))
	if !errors.Is(err, vending.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent responder: %v; want ErrUnavailable wrapping a timeout", err)
	}
	// The responder may see the last attempt just after the client gave
	// up on it.
	for deadline := time.Now().Add(5 * time.Second); silent.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := silent.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3 (1 + 2 retries)", n)
	}

	// The caller's context ends the retries.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

func TestPrefetchConcurrentUnique(t *testing.T) {
	for _, tc := range []struct {
		name           string
		size, lowWater int
		maxBatch       int
	}{
		{"a refill of 500", 500, 100, 0},
		{"a buffer above the max batch, refilled in one ranges request", 1000, 300, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.Server(t)
			startSegmentVendor(t, s, "order")
			nc := natstest.Conn(t, s)
			var ranges, other atomic.Int64
			spy, err := nc.Subscribe("leaf.segment.order", func(m *nats.Msg) {
				if m.Header.Get(vending.EncodingHeader) == vending.EncodingRanges && string(m.Data) == strconv.Itoa(tc.size) {
					ranges.Add(1)
				} else {
					other.Add(1)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer spy.Unsubscribe()
			c := newClient(t, nc, vending.ClientConfig{MaxBatch: tc.maxBatch, Prefetch: tc.size, LowWater: tc.lowWater})
			order, _ := c.Segment("order")

			const goroutines, each = 32, 2000
			got := make([][]int64, goroutines)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range each {
						if g%2 == 1 && i%50 == 0 { // some take blocks
							b, err := order.Block(t.Context(), 50)
							if err != nil {
								t.Error(err)
								return
							}
							for id, ok := b.Next(); ok; id, ok = b.Next() {
								got[g] = append(got[g], id)
							}
							continue
						}
						if g%2 == 1 && i%50 != 0 {
							continue
						}
						id, err := order.Next(t.Context())
						if err != nil {
							t.Error(err)
							return
						}
						got[g] = append(got[g], id)
					}
				})
			}
			wg.Wait()
			seen := make(map[int64]bool, goroutines*each)
			for g, ids := range got {
				for i, id := range ids {
					if id <= 0 || seen[id] {
						t.Fatalf("ID %d repeated or not positive", id)
					}
					if i > 0 && id <= ids[i-1] {
						t.Fatalf("goroutine %d: ID %d after %d", g, id, ids[i-1])
					}
					seen[id] = true
				}
			}
			if len(seen) != goroutines*each {
				t.Fatalf("%d IDs, want %d", len(seen), goroutines*each)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			// The spy hears of a refill request in its own goroutine.
			for deadline := time.Now().Add(5 * time.Second); ranges.Load() < int64(goroutines*each/tc.size) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			if ranges.Load() < int64(goroutines*each/tc.size) || other.Load() != 0 {
				t.Fatalf("refill requests: %d in ranges of %d, %d other; want all ranges of %d", ranges.Load(), tc.size, other.Load(), tc.size)
			}
			if _, err := order.Next(t.Context()); !errors.Is(err, vending.ErrClientClosed) {
				t.Fatalf("Next after Close: %v", err)
			}
		})
	}
}

// One goroutine taking from a tag served by one vendor sees every ID in
// ascending order, across refills.
func TestPrefetchOneGoroutineAscends(t *testing.T) {
	s := natstest.Server(t)
	startSegmentVendor(t, s, "order")
	c := newClient(t, natstest.Conn(t, s), vending.ClientConfig{Prefetch: 1000, LowWater: 900})
	order, _ := c.Segment("order")
	ctx := ctxT(t)
	prev := int64(0)
	for i := range 50_000 {
		id, err := order.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id <= prev {
			t.Fatalf("ID %d (the %d-th) after %d", id, i, prev)
		}
		prev = id
	}
}

func TestPrefetchSurfacesRefillErrors(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	var failing atomic.Bool
	var last atomic.Int64
	count := responder(t, nc, "leaf.snowflake", func(_ int, req *nats.Msg) *nats.Msg {
		if failing.Load() {
			return errorReply(503)
		}
		n, _ := strconv.ParseInt(string(req.Data), 10, 64)
		first := last.Add(n) - n + 1
		return rangesReply(ids.Range{First: first, Count: n})
	})
	c := newClient(t, nc, vending.ClientConfig{Prefetch: 100, LowWater: 10, Retries: -1})
	ctx := ctxT(t)

	if id, err := c.Next(ctx); err != nil || id != 1 {
		t.Fatalf("Next = %d, %v", id, err)
	}
	failing.Store(true)
	// The buffer drains; the refill that fails below the low-water mark is
	// reported by the Next that finds the buffer empty, not before.
	var id int64
	var err error
	for want := int64(2); ; want++ {
		id, err = c.Next(ctx)
		if err != nil {
			break
		}
		if id != want {
			t.Fatalf("Next = %d, want %d", id, want)
		}
	}
	if !errors.Is(err, vending.ErrUnavailable) || id != 0 {
		t.Fatalf("after the buffer: %d, %v; want the refill's 503", id, err)
	}
	if last.Load() != 100 {
		t.Fatalf("%d IDs vended, want the first refill's 100", last.Load())
	}
	failing.Store(false)
	if id, err := c.Next(ctx); err != nil || id != 101 {
		t.Fatalf("after recovery: %d, %v; want 101", id, err)
	}
	if count.Load() < 3 {
		t.Fatalf("%d requests", count.Load())
	}
}

func TestCloseStopsRefillInFlight(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	arrived := make(chan struct{}, 1)
	responder(t, nc, "leaf.snowflake", func(int, *nats.Msg) *nats.Msg {
		arrived <- struct{}{}
		return nil // never answers: the refill waits for its timeout
	})
	c, err := vending.NewClient(nc, vending.ClientConfig{Prefetch: 10, LowWater: 1, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() {
		_, err := c.Next(context.Background())
		errs <- err
	}()
	<-arrived
	if err := c.Close(); err != nil { // returns only once the refill goroutine ended
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, vending.ErrClientClosed) {
		t.Fatalf("Next waiting on Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestPrefetchNextN(t *testing.T) {
	s := natstest.Server(t)
	startSegmentVendor(t, s, "order")
	c := newClient(t, natstest.Conn(t, s), vending.ClientConfig{Prefetch: 100, LowWater: 50})
	order, _ := c.Segment("order")
	ctx := ctxT(t)
	if id, err := order.Next(ctx); err != nil || id != 1 {
		t.Fatalf("Next = %d, %v", id, err)
	}
	ids, err := order.NextN(ctx, 10) // from the buffer
	if err != nil || fmt.Sprint(ids) != "[2 3 4 5 6 7 8 9 10 11]" {
		t.Fatalf("NextN(10) = %v, %v", ids, err)
	}
	big, err := order.NextN(ctx, 1000) // more than the buffer: its own request
	if err != nil || len(big) != 1000 || big[0] <= 100 {
		t.Fatalf("NextN(1000) = %d IDs from %v, %v", len(big), big[:1], err)
	}
}

// BenchmarkClientPrefetch measures handing out prefetched segment IDs in
// one process, where the buffer holds 100,000,000 IDs (refilled in one
// ranges request, a few bytes, at half): Next from one goroutine and from
// eight (one shared atomic), and blocks of 4096 per goroutine (no shared
// write per ID). Run with -cpu 1,2,8 to see the goroutines scale.
func BenchmarkClientPrefetch(b *testing.B) {
	s := natstest.Server(b)
	startSegmentVendor(b, s, "order")
	c := newClient(b, natstest.Conn(b, s), vending.ClientConfig{Prefetch: 100_000_000, LowWater: 50_000_000})
	order, _ := c.Segment("order")
	ctx := context.Background()
	if _, err := order.Next(ctx); err != nil { // the first refill
		b.Fatal(err)
	}
	b.Run("Next", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := order.Next(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
	})
	b.Run("Block", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var blk vending.Block
			for pb.Next() {
				if _, ok := blk.Next(); ok {
					continue
				}
				var err error
				if blk, err = order.Block(ctx, 4096); err != nil {
					b.Error(err)
					return
				}
				blk.Next()
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
	})
}

func BenchmarkClientNextN1000(b *testing.B) {
	s := natstest.Server(b)
	startSegmentVendor(b, s, "order")
	c := newClient(b, natstest.Conn(b, s), vending.ClientConfig{})
	order, _ := c.Segment("order")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := order.NextN(ctx, 1000); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "ids/s")
}

// A strict tag's IDs are never buffered: each Next and Block is one
// request, whose IDs are above those of every reply received before, and
// the tag's first strict reply drops what the buffer held. When the tag is
// normal again, the buffer serves again.
func TestPrefetchBypassedForStrictTags(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	var strict atomic.Bool
	var last atomic.Int64
	count := responder(t, nc, "leaf.segment.orders", func(_ int, req *nats.Msg) *nats.Msg {
		n := int64(1)
		if len(req.Data) > 0 {
			n, _ = strconv.ParseInt(string(req.Data), 10, 64)
		}
		first := last.Add(n) - n + 1
		m := rangesReply(ids.Range{First: first, Count: n})
		if req.Header.Get(vending.EncodingHeader) != vending.EncodingRanges {
			m = nats.NewMsg("")
			m.Data = strconv.AppendInt(nil, first, 10)
		}
		if strict.Load() {
			m.Header.Set(vending.StrictHeader, "true")
		}
		return m
	})
	c := newClient(t, nc, vending.ClientConfig{Prefetch: 100, LowWater: 10})
	src, err := c.Segment("orders")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)

	if id, err := src.Next(ctx); err != nil || id != 1 {
		t.Fatalf("Next = %d, %v", id, err)
	}
	if got := count.Load(); got != 1 {
		t.Fatalf("%d requests for a buffered Next", got)
	}
	strict.Store(true)
	// The buffer still holds 2..100; a request the tag answers as strict
	// (here a refill forced by a block larger than the buffer holds) makes
	// the client drop it.
	if _, err := src.Block(ctx, 200); err != nil {
		t.Fatal(err)
	}
	before := count.Load()
	for i := range 5 {
		id, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id != last.Load() {
			t.Fatalf("Next %d = %d: not the newest ID vended (%d); a buffered one", i, id, last.Load())
		}
	}
	b, err := src.Block(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if first, _ := b.Next(); first != last.Load()-9 {
		t.Fatalf("Block starts at %d, want %d: one request of its own", first, last.Load()-9)
	}
	if got := count.Load() - before; got != 6 {
		t.Fatalf("%d requests for 5 Next and 1 Block of a strict tag, want 6", got)
	}

	strict.Store(false)
	if _, err := src.Next(ctx); err != nil { // a normal reply: buffering again
		t.Fatal(err)
	}
	before = count.Load()
	for range 50 {
		if _, err := src.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := count.Load() - before; got > 2 {
		t.Fatalf("%d requests for 50 Next of a normal tag with prefetch 100", got)
	}
}

// The codes of what can go wrong, and which the client retries: a tag used
// up (410) never, a mode switch under a request (503) yes; nothing here is
// a 500.
func TestCodesOfExhaustionAndModeSwitches(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{&segment.TagError{Tag: "top", Err: segment.ErrExhausted}, vending.CodeGone},
		{fmt.Errorf("x: %w", snowflake.ErrTimeOverflow), vending.CodeGone},
		{fmt.Errorf("x: %w", segment.ErrNotStrict), vending.CodeUnavailable},
		{fmt.Errorf("x: %w", segment.ErrStrict), vending.CodeUnavailable},
	} {
		if got := vending.Code(tc.err); got != tc.code {
			t.Errorf("Code(%v) = %d, want %d", tc.err, got, tc.code)
		}
	}

	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	var asked atomic.Int64
	if _, err := nc.Subscribe("leaf.segment.top", func(m *nats.Msg) {
		asked.Add(1)
		r := nats.NewMsg(m.Reply)
		r.Header.Set(micro.ErrorCodeHeader, "410")
		r.Header.Set(micro.ErrorHeader, "segment: tag \"top\": used up")
		m.RespondMsg(r)
	}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, nc, vending.ClientConfig{Retries: 3, Timeout: time.Second, BackoffMin: time.Millisecond})
	src, err := c.Segment("top")
	if err != nil {
		t.Fatal(err)
	}
	_, err = src.Next(ctxT(t))
	if !errors.Is(err, vending.ErrGone) || asked.Load() != 1 {
		t.Fatalf("a 410: %v after %d requests; want ErrGone after one", err, asked.Load())
	}
}
