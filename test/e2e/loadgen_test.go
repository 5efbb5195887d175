package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/pgtest"
	"github.com/leaf-nats/leaf/ordercheck"
)

// buildLoadgen builds cmd/loadgen for the test: it is run as users run it.
func buildLoadgen(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "loadgen")
	if out, err := exec.Command(goTool(), "build", "-o", bin, "github.com/leaf-nats/leaf/cmd/loadgen").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/loadgen: %v\n%s", err, out)
	}
	return bin
}

// runLoadgen runs the loadgen binary with -json and args, and returns its
// report and exit code.
func runLoadgen(t testing.TB, bin string, args ...string) (map[string]any, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append([]string{"-json"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("loadgen %v: %v", args, err)
	}
	var r map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("loadgen %v: exit %d, output %q: %v\n%s", args, cmd.ProcessState.ExitCode(), stdout.String(), err, stderr.String())
	}
	t.Logf("loadgen %v: exit %d\n%s", args, cmd.ProcessState.ExitCode(), stderr.String())
	return r, cmd.ProcessState.ExitCode()
}

// TestLoadgenOrder: loadgen -check-order against two vendors. A normal tag
// with a step of 10 breaks the order (each vendor hands out its own
// segment, and one request after another lands on either), so the check
// can fail; a strict tag never does. The history of each run, checked
// offline, counts what the run counted.
func TestLoadgenOrder(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	ns := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_POSTGRES_URL": pgtest.DSN(t)}
	vendorCommand(t, env, "tags", "add", "plain", "-step", "10")
	vendorCommand(t, env, "tags", "add", "ledger", "-strict", "-step", "10")
	startVendors(t, "o", 2, env)
	bin := buildLoadgen(t)
	dir := t.TempDir()

	for _, tc := range []struct {
		tag, kind string
		args      []string
		broken    bool // the order is expected to break: violations, exit 1
	}{
		// One request at a time: the queue group picks either vendor for
		// each, so replies go back and forth between two segments.
		{"plain", "normal", []string{"-c", "1", "-n", "400"}, true},
		{"ledger", "strict", []string{"-c", "4", "-n", "2000", "-retries", "3"}, false},
	} {
		history := filepath.Join(dir, tc.tag+".jsonl")
		r, code := runLoadgen(t, bin, append([]string{"-url", ns.url(), "-mode", "segment", "-tag", tc.tag, "-timeout", "5s",
			"-check-order", "-history", history}, tc.args...)...)
		violations, _ := r["order_violations"].(float64)
		wantCode := 0
		if tc.broken {
			wantCode = 1
		}
		if code != wantCode || (violations > 0) != tc.broken || r["dups"] != 0.0 || r["requests"].(float64) == 0 {
			t.Fatalf("%s tag: exit %d, report %v; want exit %d", tc.kind, code, r, wantCode)
		}
		h, code := runLoadgen(t, bin, "-check-history", history)
		if code != wantCode || h["order_violations"] != violations || h["replies"] != r["requests"] {
			t.Fatalf("%s tag: -check-history: exit %d, report %v; want exit %d, %v violations in %v replies",
				tc.kind, code, h, wantCode, violations, r["requests"])
		}
		f, err := os.Open(history)
		if err != nil {
			t.Fatal(err)
		}
		_, res, err := ordercheck.CheckHistory(f)
		f.Close()
		if err != nil || float64(res.Violations) != violations {
			t.Fatalf("%s tag: ordercheck.CheckHistory: %d violations, %v; want %v", tc.kind, res.Violations, err, violations)
		}
		report(t, "loadgen -check-order, %s tag on 2 vendors: %v requests, %v order violations (offline: %v), errors %v",
			tc.kind, r["requests"], violations, h["order_violations"], r["errors_by_code"])
	}
}
