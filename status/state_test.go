package status

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/workerid"
	"github.com/prometheus/client_golang/prometheus"
)

// A claim that waits says why and how long is left, in /readyz and on the
// status page, which both show NotReady.
func TestNotReadyCountsDown(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	s := Status{Now: now, NATS: true}
	ks := workerid.Status{Waiting: "worker ID 7 has no recorded last timestamp", WaitingUntil: now.Add(7200 * time.Millisecond)}
	if got := notReady(s, ks, false); !strings.HasSuffix(got, "worker ID 7 has no recorded last timestamp (7.2s left)") {
		t.Fatalf("notReady = %q", got)
	}
	ks.WaitingUntil = time.Time{}
	if got := notReady(s, ks, false); strings.Contains(got, "left") {
		t.Fatalf("with no end known: %q", got)
	}
}

// The HTTP server answers from the start: it lives, and says what the start
// does and why it retries, until the vendor's state is served.
func TestServerWhileStarting(t *testing.T) {
	hs, err := OpenServer(ServerConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Close(context.Background()) })
	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get("http://" + hs.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || !strings.Contains(body, "starting") {
		t.Fatalf("/healthz while starting: %d %q", code, body)
	}
	hs.Starting("open the segment store", errors.New("connection refused"))
	for _, path := range []string{"/readyz", "/", "/metrics"} {
		if code, body := get(path); code != 503 || !strings.Contains(body, "starting: open the segment store, retrying after: connection refused") {
			t.Fatalf("%s while starting: %d %q", path, code, body)
		}
	}
	reg := prometheus.NewRegistry()
	hs.Serve(Handlers{State: &State{}, Registry: reg, Peers: &StatsAsker{}})
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz once served: %d %q", code, body)
	}
	if code, _ := get("/metrics"); code != 200 {
		t.Fatalf("/metrics once served: %d", code)
	}
}
