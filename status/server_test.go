package status

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/workerid"
)

// fakeKeeper holds a worker ID for an hour.
type fakeKeeper struct{}

var _ Keeper = fakeKeeper{}

func (fakeKeeper) Status() workerid.Status {
	return workerid.Status{Held: true, Deadline: time.Now().Add(time.Hour)}
}

type fakeRows struct{}

var _ Rows = fakeRows{}

func (fakeRows) List(context.Context) ([]segment.Row, error) { return nil, nil }

type fakeGuard struct{}

var _ Guard = fakeGuard{}

func (fakeGuard) Status() cluster.Status { return cluster.Status{} }

func newFakeState(alloc *fakeAllocator) *State {
	return NewState(Sources{Instance: "test", Keeper: fakeKeeper{}, Allocator: alloc, Store: fakeRows{}, Guard: fakeGuard{},
		Clock: snowflake.SystemClock{}, Connected: func() bool { return true }})
}

// /readyz costs the same whatever the number of tags: it reads them only
// when the store is down, to see whether any has IDs left.
func TestReadyzReadsTagsOnlyWhenTheStoreIsDown(t *testing.T) {
	alloc := &fakeAllocator{left: map[string]int64{}}
	for i := range 10_000 {
		alloc.left[fmt.Sprintf("t%05d", i)] = 0 // used up
	}
	state := newFakeState(alloc)
	ready := func() (int, string) {
		rec := httptest.NewRecorder()
		state.serveReady(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := ready(); code != http.StatusOK || alloc.snapshots.Load() != 0 {
		t.Fatalf("store up: %d %q, tags read %d times", code, body, alloc.snapshots.Load())
	}
	alloc.down.Store(true)
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "no buffered segments") || alloc.snapshots.Load() != 1 {
		t.Fatalf("store down, nothing buffered: %d %q, tags read %d times", code, body, alloc.snapshots.Load())
	}
	alloc.left["t09999"] = 10
	if code, body := ready(); code != http.StatusOK {
		t.Fatalf("store down, a tag buffered: %d %q", code, body)
	}
}

// With every connection the server holds busy (readers that do not read,
// pipelined requests), /healthz and /readyz still answer on new
// connections, in the room kept for them, where nothing else is served;
// connections that stall there give way to new ones.
func TestHealthAnsweredPastTheCap(t *testing.T) {
	const maxConns = 4
	hs, err := OpenServer(ServerConfig{Addr: "127.0.0.1:0", MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Close(context.Background()) })
	entered, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) }) // before Close
	hold := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		entered <- struct{}{}
		<-release
	})
	hs.Serve(Handlers{State: newFakeState(&fakeAllocator{}), Registry: prometheus.NewRegistry(), Peers: &StatsAsker{}, API: hold})
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", hs.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for range maxConns {
		fmt.Fprintf(dial(), "GET /api/hold HTTP/1.1\r\nHost: leaf\r\n\r\n")
		<-entered
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get("http://" + hs.Addr() + path)
		if err != nil {
			t.Fatalf("%s with every connection busy: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := range 3 * healthConns {
		if i%healthConns == 0 {
			// Connections that stall in the room: they give way.
			for range healthConns {
				dial()
			}
		}
		if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
			t.Fatalf("/healthz with every connection busy: %d %q", code, body)
		}
		if code, body := get("/readyz"); code != http.StatusOK {
			t.Fatalf("/readyz with every connection busy: %d %q", code, body)
		}
	}
	if code, body := get("/metrics"); code != http.StatusServiceUnavailable || !strings.Contains(body, "only /healthz and /readyz") {
		t.Fatalf("/metrics with every connection busy: %d %q", code, body)
	}
	if n := hs.conns.open(); n > maxConns+healthConns {
		t.Fatalf("the server holds %d connections, more than %d and %d for health checks", n, maxConns, healthConns)
	}
}
