package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// leafGet requests url with method and returns the status, the
// Content-Type and the body.
func leafGet(t *testing.T, method, url string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestLeafAPI requests Leaf's HTTP API of a running vendor as Leaf's
// clients do, and checks every answer against leaf-server's: the ID alone
// on success, Spring's JSON error with Leaf's Result for a failure, Spring's
// 404 for a path with no key.
func TestLeafAPI(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	t.Setenv("LEAF_NATS_STORE_DIR", t.TempDir())
	var out bytes.Buffer
	if code := run(context.Background(), []string{"tags", "add", "leaf-segment-test", "-step", "2000"}, &out, &out); code != 0 {
		t.Fatalf("tags add: %d %s", code, out.String())
	}
	_, logs := startVendor(t, map[string]string{"LEAF_HTTP_LEAF_API": "true"})
	base := strings.TrimSuffix(httpURL(t, logs), "/")

	type want struct {
		status  int
		ctype   string
		body    string // exact, or for JSON the message
		exclass string // the exception of a JSON error
	}
	const text, jsonType = "text/plain;charset=UTF-8", "application/json;charset=UTF-8"
	leafErr := "com.sankuai.inf.leaf.server.exception.LeafServerException"
	for _, tc := range []struct {
		method, path string
		want         want
	}{
		// leaf-server's README: the first ID of a new tag with max_id 1 is 1.
		{"GET", "/api/segment/get/leaf-segment-test", want{200, text, "1", ""}},
		{"GET", "/api/segment/get/leaf-segment-test", want{200, text, "2", ""}},
		// Leaf maps no method: any is answered.
		{"POST", "/api/segment/get/leaf-segment-test", want{200, text, "3", ""}},
		// Spring matches a trailing slash.
		{"GET", "/api/segment/get/leaf-segment-test/", want{200, text, "4", ""}},
		{"GET", "/api/segment/get/nosuch", want{500, jsonType, "Result{id=-2, status=EXCEPTION}", leafErr}},
		// A tag leaf-nats cannot hold is one it does not have.
		{"GET", "/api/segment/get/bad*tag", want{500, jsonType, "Result{id=-2, status=EXCEPTION}", leafErr}},
		// No key: no controller maps the path.
		{"GET", "/api/segment/get/", want{404, jsonType, "No message available", ""}},
		{"GET", "/api/snowflake/get/", want{404, jsonType, "No message available", ""}},
		{"GET", "/api/segment/get/a/b", want{404, jsonType, "No message available", ""}},
		{"GET", "/api/tags/add/x", want{404, jsonType, "No message available", ""}},
	} {
		status, ctype, body := leafGet(t, tc.method, base+tc.path)
		if tc.want.exclass == "" && tc.want.status == 200 {
			if status != 200 || ctype != tc.want.ctype || body != tc.want.body {
				t.Errorf("%s %s: %d %q %q, want %d %q %q", tc.method, tc.path, status, ctype, body, tc.want.status, tc.want.ctype, tc.want.body)
			}
			continue
		}
		var e springError
		if status != tc.want.status || ctype != tc.want.ctype || json.Unmarshal([]byte(body), &e) != nil ||
			e.Status != tc.want.status || e.Error != http.StatusText(tc.want.status) || e.Message != tc.want.body ||
			e.Exception != tc.want.exclass || e.Path != tc.path || e.Timestamp < time.Now().Add(-time.Minute).UnixMilli() {
			t.Errorf("%s %s: %d %q %s, want %d %q with message %q, exception %q", tc.method, tc.path, status, ctype, body,
				tc.want.status, tc.want.ctype, tc.want.body, tc.want.exclass)
		}
	}

	// Snowflake: the key is ignored, as Leaf does; the ID decodes to this
	// vendor's worker ID.
	var sfs []int64
	for _, key := range []string{"leaf-snowflake-test", "anything", "x"} {
		status, ctype, body := leafGet(t, "GET", base+"/api/snowflake/get/"+key)
		id, err := strconv.ParseInt(body, 10, 64)
		if status != 200 || ctype != text || err != nil || id <= 0 {
			t.Fatalf("snowflake %s: %d %q %q", key, status, ctype, body)
		}
		sfs = append(sfs, id)
	}
	msg, err := nc.Request("leaf.snowflake.decode", []byte(strconv.FormatInt(sfs[0], 10)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var dec struct {
		WorkerID int `json:"worker_id"`
	}
	parts, err := snowflake.Decode(sfs[0], snowflake.DefaultEpoch)
	if err != nil || json.Unmarshal(msg.Data, &dec) != nil || parts.WorkerID != dec.WorkerID {
		t.Fatalf("decode %d: %s (%+v, %v)", sfs[0], msg.Data, parts, err)
	}
	if !(sfs[0] < sfs[1] && sfs[1] < sfs[2]) {
		t.Fatalf("snowflake IDs not increasing: %v", sfs)
	}

	// Concurrency: HTTP and NATS clients take from the same tag at once;
	// every ID is handed out once.
	const clients, each = 16, 100
	var (
		mu       sync.Mutex
		seen     = map[int64]string{}
		busy     int // HTTP requests told to back off
		natsBusy int // NATS requests told to back off
		errs     []string
		wg       sync.WaitGroup
	)
	note := func(id int64, by string) {
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := seen[id]; dup {
			errs = append(errs, "ID "+strconv.FormatInt(id, 10)+" twice: "+prev+" and "+by)
		}
		seen[id] = by
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for c := range clients {
		wg.Go(func() {
			for range each {
				if c%2 == 0 {
					msg, err := nc.Request("leaf.segment.leaf-segment-test", []byte("3"), 5*time.Second)
					if err == nil && msg.Header.Get(micro.ErrorCodeHeader) == "503" { // a slow store load
						mu.Lock()
						natsBusy++
						mu.Unlock()
						continue
					}
					var ids []int64
					if err == nil {
						ids, err = vending.DecodeText(nil, msg.Data)
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, "NATS: "+err.Error())
						mu.Unlock()
						continue
					}
					for _, id := range ids {
						note(id, "NATS")
					}
					continue
				}
				resp, err := client.Get(base + "/api/segment/get/leaf-segment-test")
				if err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable { // told to back off
					mu.Lock()
					busy++
					mu.Unlock()
					continue
				}
				id, err := strconv.ParseInt(string(b), 10, 64)
				if resp.StatusCode != 200 || err != nil || id <= 0 {
					mu.Lock()
					errs = append(errs, "HTTP "+resp.Status+": "+string(b))
					mu.Unlock()
					continue
				}
				note(id, "HTTP")
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %s", len(errs), errs[0])
	}
	if want := clients / 2 * each * 4; len(seen) < want-busy-3*natsBusy {
		t.Fatalf("%d distinct IDs, want %d (%d HTTP and %d NATS requests told to back off)", len(seen), want, busy, natsBusy)
	}
	t.Logf("%d distinct segment IDs from %d HTTP and NATS clients, 0 duplicates, %d HTTP and %d NATS 503s", len(seen), clients, busy, natsBusy)

	_, _, metrics := leafGet(t, "GET", base+"/metrics")
	for _, w := range []string{
		`leaf_http_api_requests_total{code="200",mode="segment"}`,
		`leaf_http_api_requests_total{code="500",mode="segment"} 2`,
		`leaf_http_api_requests_total{code="404",mode="none"} 4`,
		`leaf_http_api_requests_total{code="200",mode="snowflake"} 3`,
		`leaf_requests_total{code="404",mode="segment",tag=""} 2`,
	} {
		if !strings.Contains(metrics, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
}

// TestLeafAPIOff: without LEAF_HTTP_LEAF_API nothing of Leaf's API answers.
func TestLeafAPIOff(t *testing.T) {
	s := natstest.Server(t)
	_, logs := startVendor(t, map[string]string{"LEAF_NATS_URL": s.ClientURL(), "LEAF_NATS_STORE_DIR": t.TempDir()})
	if status, _, body := leafGet(t, "GET", httpURL(t, logs)+"api/snowflake/get/x"); status != 404 {
		t.Fatalf("Leaf's API answers while off: %d %s", status, body)
	}
}

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
	a := newLeafAPI(Config{HTTPLeafAPI: true}, src, noSegments{}, nopObserver{}, prometheus.NewRegistry())
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
	go func() { a.close(); close(closed) }()
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
