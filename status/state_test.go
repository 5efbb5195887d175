package status

import (
	"strings"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/workerid"
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
