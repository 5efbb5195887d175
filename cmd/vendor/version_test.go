package main

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/testtool"
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

// TestMetricsLint runs a serving vendor's /metrics through `promtool check
// metrics`, which checks names, units and help texts against Prometheus's
// conventions.
func TestMetricsLint(t *testing.T) {
	tool := testtool.Path(t, "promtool")
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
