package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/leaf-nats/leaf/internal/natstest"
)

func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version", "-version"} {
		var out, errOut syncBuffer
		if code := run(context.Background(), []string{arg}, &out, &errOut); code != 0 {
			t.Fatalf("vendor %s exited %d: %s", arg, code, errOut.String())
		}
		want := regexp.MustCompile(`^vendor \d+\.\d+\.\d+\S* \(revision \S+, ` + regexp.QuoteMeta(runtime.Version()) + `\)\n$`)
		if !want.MatchString(out.String()) {
			t.Errorf("vendor %s printed %q, want %s", arg, out.String(), want)
		}
	}
}

// promtool returns the path of Prometheus's promtool: scripts/test.sh
// installs Debian's prometheus package, which has it, when it is missing.
func promtool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no promtool: run scripts/test.sh, which installs it")
	}
	t.Skip("no promtool (scripts/test.sh installs it)")
	return ""
}

// TestMetricsLint runs a serving vendor's /metrics through `promtool check
// metrics`, which checks names, units and help texts against Prometheus's
// conventions.
func TestMetricsLint(t *testing.T) {
	tool := promtool(t)
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	url, _ := servingVendor(t, s, nc)
	_, metrics := get(t, url+"metrics")
	cmd := exec.Command(tool, "check", "metrics")
	cmd.Stdin = strings.NewReader(metrics)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
	}
	for _, want := range []string{"leaf_build_info{", "leaf_nats_connected 1", "leaf_worker_lease_expiry_timestamp_seconds "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
