package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/kv"
)

// A contract mismatch is lines for a terminal (Error) but one log line of
// fields: a field per differing term, the hint and what it was wrapped in,
// never an escaped line break.
func TestMismatchLogsAsFields(t *testing.T) {
	rec := Terms{Epoch: 1288834974657, Layout: "1+41+10+12", WorkerIDs: "0-1023"}.Contract(time.Minute, "vendor-a", time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	err := Check(rec, Terms{Epoch: 1600000000000, Layout: "1+41+10+12", WorkerIDs: "0-511"})
	var m *MismatchError
	if !errors.As(err, &m) {
		t.Fatalf("Check = %v, want a *MismatchError", err)
	}
	if !strings.Contains(err.Error(), "\n  epoch: the cluster's is 1288834974657, this vendor's 1600000000000; set LEAF_EPOCH=1288834974657\n") {
		t.Fatalf("Error() does not list the epoch on a line of its own:\n%s", err)
	}
	var out bytes.Buffer
	slog.New(slog.NewTextHandler(&out, nil)).Error("vendor stopped", ErrAttr(fmt.Errorf("open the cluster contract: %w", err)))
	line := out.String()
	if strings.Count(line, "\n") != 1 || strings.Contains(line, `\n`) {
		t.Fatalf("the mismatch logs as more than one line, or with escaped line breaks:\n%s", line)
	}
	for _, want := range []string{
		`err.problem="this vendor's settings differ from the cluster contract in KV bucket ` + kv.NamesOf("").Cluster,
		`err.epoch="the cluster's is 1288834974657, this vendor's 1600000000000; set LEAF_EPOCH=1288834974657"`,
		`err.worker_ids="the cluster's is 0-1023, this vendor's 0-511; set LEAF_WORKER_ID_RANGE=0-1023`,
		`err.hint="vendor cluster show prints the contract`,
		`err.while="open the cluster contract"`,
	} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %s:\n%s", want, line)
		}
	}
	out.Reset()
	slog.New(slog.NewTextHandler(&out, nil)).Error("x", ErrAttr(errors.New("plain")))
	if !strings.Contains(out.String(), "err=plain") {
		t.Errorf("another error logs as %s, want err=plain", out.String())
	}
}
