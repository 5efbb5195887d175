package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/natstest"
)

// A service answering 1, 2, 3, ... keeps the order whatever the
// concurrency; the history of the run, checked offline, agrees.
func TestRunCheckOrderOrdered(t *testing.T) {
	s := vendor(t)
	history := filepath.Join(t.TempDir(), "run.jsonl")
	r, code, stderr := runJSON(t, "-url", s.ClientURL(), "-mode", "segment", "-tag", "order", "-c", "4", "-n", "2000",
		"-batch", "3", "-check-order", "-history", history)
	if code != exitOK || r["order_violations"] != 0.0 || r["requests"] != 2000.0 {
		t.Fatalf("exit %d, report %v, stderr %s; want exit 0, 2000 requests and no order violation", code, r, stderr)
	}
	h, code, stderr := runJSON(t, "-check-history", history)
	if code != exitOK || h["replies"] != 2000.0 || h["order_violations"] != 0.0 || h["subject"] != "leaf.segment.order" {
		t.Fatalf("-check-history: exit %d, report %v, stderr %s; want 2000 replies and no violation", code, h, stderr)
	}
}

// backwards answers each segment request with an ID lower than the last:
// every reply but the first breaks the order.
func backwards(t *testing.T) string {
	t.Helper()
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	next := int64(1_000_000)
	sub, err := nc.Subscribe("leaf.segment.back", func(m *nats.Msg) {
		m.Respond(strconv.AppendInt(nil, next, 10))
		next--
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	nc.Flush()
	return s.ClientURL()
}

func TestRunCheckOrderFindsViolations(t *testing.T) {
	url := backwards(t)
	history := filepath.Join(t.TempDir(), "run.jsonl")
	r, code, stderr := runJSON(t, "-url", url, "-mode", "segment", "-tag", "back", "-c", "1", "-n", "50", "-check-order", "-history", history)
	if code != exitFail || r["order_violations"] != 49.0 || r["dups"] != 0.0 || !strings.Contains(stderr, "FAIL: 49 order violations") {
		t.Fatalf("exit %d, report %v, stderr %q; want exit 1 and 49 order violations", code, r, stderr)
	}
	examples := r["order_examples"].([]any)
	if len(examples) != 5 || !strings.Contains(examples[0].(string), "holds ID 999999, not above ID 1000000") {
		t.Fatalf("examples %v; want 5, the first of ID 999999 after 1000000", examples)
	}
	h, code, stderr := runJSON(t, "-check-history", history)
	if code != exitFail || h["order_violations"] != 49.0 || h["replies"] != 50.0 || !strings.Contains(stderr, "FAIL: 49 order violations") {
		t.Fatalf("-check-history: exit %d, report %v, stderr %q; want exit 1 and the 49 violations", code, h, stderr)
	}

	var stdout, errs bytes.Buffer
	code = run(t.Context(), []string{"-check-history", history}, &stdout, &errs)
	if code != exitFail || !strings.Contains(stdout.String(), "order     49 violations") {
		t.Fatalf("-check-history: exit %d, output\n%s", code, stdout.String())
	}
	stdout.Reset()
	code = run(t.Context(), []string{"-url", url, "-mode", "segment", "-tag", "back", "-c", "1", "-n", "3", "-check-order"}, &stdout, &errs)
	if code != exitFail || !strings.Contains(stdout.String(), "order     2 violations") {
		t.Fatalf("exit %d, output\n%s", code, stdout.String())
	}
}

// Without -check-order the order is not looked at: a run that breaks it
// passes, and its report says nothing of order.
func TestRunWithoutCheckOrder(t *testing.T) {
	r, code, stderr := runJSON(t, "-url", backwards(t), "-mode", "segment", "-tag", "back", "-c", "1", "-n", "10")
	if _, ok := r["order_violations"]; code != exitOK || ok {
		t.Fatalf("exit %d, report %v, stderr %s; want exit 0 and no order_violations", code, r, stderr)
	}
}

// Failed requests are in the history with their error code, and are no
// replies to check.
func TestHistoryOfErrors(t *testing.T) {
	s := natstest.Server(t) // no vendor: every request finds no responders
	history := filepath.Join(t.TempDir(), "run.jsonl")
	r, code, _ := runJSON(t, "-url", s.ClientURL(), "-n", "5", "-c", "1", "-history", history)
	if code != exitFail || r["errors"] != 5.0 {
		t.Fatalf("exit %d, report %v; want exit 1 and 5 errors", code, r)
	}
	b, err := os.ReadFile(history)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"error":"no_responders"`); n != 5 {
		t.Fatalf("history has %d no_responders lines, want 5:\n%s", n, b)
	}
	h, code, _ := runJSON(t, "-check-history", history)
	if code != exitOK || h["replies"] != 0.0 || h["order_violations"] != 0.0 {
		t.Fatalf("-check-history: exit %d, report %v; want no replies, no violation", code, h)
	}
}

func TestHistoryFileErrors(t *testing.T) {
	s := vendor(t)
	dir := t.TempDir()
	_, code, stderr := runJSON(t, "-url", s.ClientURL(), "-n", "1", "-history", filepath.Join(dir, "no", "such", "dir"))
	if code != exitUsage || !strings.Contains(stderr, "-history") {
		t.Fatalf("exit %d, stderr %q; want 2 and the -history error", code, stderr)
	}
	for _, tc := range []struct{ name, content, want string }{
		{"missing", "", "no such file"},
		{"not a history", "hello\n", "not a leaf-loadgen-history/1 header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if tc.content != "" {
				if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var stdout, stderr bytes.Buffer
			if code := run(t.Context(), []string{"-check-history", path}, &stdout, &stderr); code != exitFail || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}
