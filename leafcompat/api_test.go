package leafcompat

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// blockingSource hands out IDs only when release is closed.
type blockingSource struct {
	entered chan struct{}
	release chan struct{}
	next    int64
	mu      sync.Mutex
}

var _ vending.Snowflake = (*blockingSource)(nil)

func (b *blockingSource) NextRanges(dst []ids.Range, n int) ([]ids.Range, error) {
	b.entered <- struct{}{}
	<-b.release
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	return append(dst, ids.Range{First: b.next, Count: 1}), nil
}

type noSegments struct{}

func (noSegments) IsStrict(string) bool                 { return false }
func (noSegments) HandOff(string, vending.Handing) bool { return false }
func (noSegments) Leans(string) bool                    { return false }

func (noSegments) TryTakeRanges(tag string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	return dst, false, segment.ErrUnknownTag
}

func (noSegments) TakeRanges(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	return dst, segment.ErrUnknownTag
}

type nopObserver struct{}

func (nopObserver) Observe(string, string, int, int, time.Duration) {}
func (nopObserver) Dropped(string, string)                          {}

// TestLeafAPIAdmission: with every slot taken and the queue full, a
// request is refused at once with 503 and Retry-After; close refuses the
// queued requests and lets those taking IDs finish.
func TestLeafAPIAdmission(t *testing.T) {
	src := &blockingSource{entered: make(chan struct{}), release: make(chan struct{})}
	a := New(src, noSegments{}, nopObserver{}, prometheus.NewRegistry())
	a.wait = time.Hour // the queue stays full until close
	slots, queue := leafAPISlots(), leafAPIQueue()
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest("GET", "/api/snowflake/get/k", nil))
		return rec
	}
	var wg sync.WaitGroup
	held := make(chan *httptest.ResponseRecorder, slots)
	for range slots {
		wg.Go(func() { held <- get() })
		<-src.entered // a slot is taken
	}
	queued := make(chan *httptest.ResponseRecorder, queue)
	for range queue {
		wg.Go(func() { queued <- get() })
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(a.queue) < cap(a.queue) {
		if time.Now().After(deadline) {
			t.Fatalf("queue holds %d of %d", len(a.queue), cap(a.queue))
		}
		time.Sleep(time.Millisecond)
	}
	// Full: refused without waiting (a.wait is an hour).
	rec := get()
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" ||
		!strings.Contains(rec.Body.String(), "too many HTTP requests at once") {
		t.Fatalf("refused with %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	closed := make(chan struct{})
	go func() { a.Close(context.Background()); close(closed) }()
	for range queue {
		if rec := <-queued; rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "shutting down") {
			t.Fatalf("a queued request got %d %s at close, want 503", rec.Code, rec.Body)
		}
	}
	select {
	case <-closed:
		t.Fatal("close returned while requests were taking IDs")
	default:
	}
	close(src.release)
	<-closed
	wg.Wait()
	for range slots {
		if rec := <-held; rec.Code != 200 {
			t.Fatalf("a request holding a slot got %d %s", rec.Code, rec.Body)
		}
	}
	if rec := get(); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "shutting down") {
		t.Fatalf("after close: %d %s", rec.Code, rec.Body)
	}
}

func TestLeafRoute(t *testing.T) {
	for _, tc := range []struct{ path, mode, key string }{
		{"/api/segment/get/order", vending.ModeSegment, "order"},
		{"/api/segment/get/order/", vending.ModeSegment, "order"},
		{"/api/snowflake/get/k", vending.ModeSnowflake, "k"},
		{"/api/segment/get/", "", ""},
		{"/api/segment/get", "", ""},
		{"/api/segment/get/a/b", "", ""},
		{"/api/snowflake/get//", "", ""},
		{"/api/cache", "", ""},
	} {
		mode, key, ok := leafRoute(tc.path)
		if mode != tc.mode || key != tc.key || ok != (tc.mode != "") {
			t.Errorf("leafRoute(%q) = %q %q %v, want %q %q", tc.path, mode, key, ok, tc.mode, tc.key)
		}
	}
}

func TestLeafResultID(t *testing.T) {
	for _, tc := range []struct {
		mode string
		err  error
		want int64
	}{
		{vending.ModeSegment, segment.ErrUnknownTag, -2},
		{vending.ModeSegment, segment.ErrUnavailable, -3},
		{vending.ModeSnowflake, snowflake.ErrClockBackwards, -3},
		{vending.ModeSnowflake, snowflake.ErrNoLease, -1},
		{vending.ModeSegment, segment.ErrStoreMoved, -1},
	} {
		if got := leafResultID(tc.mode, tc.err); got != tc.want {
			t.Errorf("leafResultID(%s, %v) = %d, want %d", tc.mode, tc.err, got, tc.want)
		}
	}
}
