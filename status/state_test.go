package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaf-nats/leaf/workerid"
)

// A claim that waits says why and how long is left, in /readyz and on the
// status page, which both show NotReady.
func TestNotReadyCountsDown(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	s := Status{Now: now, NATS: true}
	ks := workerid.Status{Waiting: "worker ID 7 has no recorded last timestamp", WaitingUntil: now.Add(7200 * time.Millisecond)}
	if got := snowflakeNotReady(s, ks); !strings.HasSuffix(got, "worker ID 7 has no recorded last timestamp (7.2s left)") {
		t.Fatalf("snowflakeNotReady = %q", got)
	}
	ks.WaitingUntil = time.Time{}
	if got := snowflakeNotReady(s, ks); strings.Contains(got, "left") {
		t.Fatalf("with no end known: %q", got)
	}
}

// Each mode's readiness is its own: a vendor claiming a worker ID serves
// segments, one whose store is down with no buffers serves snowflake IDs;
// it is ready when it serves both.
func TestReadinessPerMode(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	held := workerid.Status{Held: true, Deadline: now.Add(time.Hour)}
	for _, tc := range []struct {
		name               string
		s                  Status
		ks                 workerid.Status
		snowflake, segment bool
	}{
		{"both", Status{Now: now, NATS: true, Worker: WorkerStatus{Held: true}, Segments: segmentStatus{StoreUp: true}}, held, true, true},
		{"claiming", Status{Now: now, NATS: true, Segments: segmentStatus{StoreUp: true}}, workerid.Status{}, false, true},
		{"store down", Status{Now: now, NATS: true, Worker: WorkerStatus{Held: true}}, held, true, false},
		{"NATS down", Status{Now: now, Worker: WorkerStatus{Held: true}, Segments: segmentStatus{StoreUp: true}}, held, false, false},
		{"both refused", Status{Now: now, NATS: true, Worker: WorkerStatus{Held: true}, Segments: segmentStatus{StoreUp: true},
			Contract: ContractState{Refused: "store gone", SnowflakeRefused: "store gone"}}, held, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			s.setReady(tc.ks, false)
			if (s.Modes.Snowflake == "") != tc.snowflake || (s.Modes.Segments == "") != tc.segment || s.Ready != (tc.snowflake && tc.segment) {
				t.Fatalf("modes %+v, ready %v (%q)", s.Modes, s.Ready, s.NotReady)
			}
			if strings.Count(s.NotReady, "store gone") > 1 {
				t.Fatalf("one cause said twice: %q", s.NotReady)
			}
		})
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

// Micro stats fit in one NATS reply whatever the number of tags: Trim keeps
// the most recently loaded, and the totals say how many there are.
func TestTrimKeepsRepliesSmall(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	var s Status
	for i := range 100_000 {
		s.Segments.Tags = append(s.Segments.Tags, tagStatus{
			Tag: fmt.Sprintf("tag-%06d", i), Current: segRange{1, 2, 1001}, Step: 1000, Loads: 1,
			LastLoad: now.Add(time.Duration(i%1000) * time.Second),
		})
		s.Segments.Rows = append(s.Segments.Rows, rowStatus{Tag: fmt.Sprintf("tag-%06d", i), MaxID: 1001, Step: 1000})
	}
	s.Segments.TagsTotal = len(s.Segments.Tags)
	s.Trim(StatsTags)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	// Two endpoints carry the tags; with the rest the reply must stay well
	// within the shipped max_payload of 64 KiB.
	if 2*len(b) > 32<<10 {
		t.Fatalf("a status of 100,000 tags trimmed to %d is %d bytes", StatsTags, len(b))
	}
	if len(s.Segments.Tags) != StatsTags || s.Segments.TagsTotal != 100_000 || s.Segments.RowsTotal != 100_000 {
		t.Fatalf("trimmed: %d tags of %d, %d rows of %d", len(s.Segments.Tags), s.Segments.TagsTotal, len(s.Segments.Rows), s.Segments.RowsTotal)
	}
	latest := now.Add(999 * time.Second)
	for _, ts := range s.Segments.Tags {
		if !ts.LastLoad.Equal(latest) {
			t.Fatalf("kept %s, loaded at %v; want the most recently loaded (%v)", ts.Tag, ts.LastLoad, latest)
		}
	}
}
