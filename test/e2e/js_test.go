package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/snowflake"
)

// TestJavaScriptExample runs examples/js/leaf.mjs, the README's example of
// taking IDs without the Go client, with Node and nats.js v3 from npm (the
// versions its package-lock.json pins) against a real vendor: 64-bit IDs
// arrive whole as BigInt, in text and binary, the error headers are read,
// the background prefetch hands out unique, ascending segment IDs (in runs,
// one per vendor's segment, when two vendors serve the tag: said plainly,
// not as an alarm), and what it prints for a person is a few short lines.
// npm ci installs the pinned packages on the Node it has (Debian's) without
// a warning that one wants a later Node. Against a js53 vendor
// (LEAF_SNOWFLAKE_LAYOUT=js53) it learns the layout from the service info
// and the snowflake IDs are plain JavaScript numbers, every digit intact.
func TestJavaScriptExample(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	node, npm := testtool.Path(t, "node"), testtool.Path(t, "npm")
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "leaf.mjs"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "js", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=warn")
	install.Dir = dir
	out, err := install.CombinedOutput()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
		t.Skipf("npm ci: %v (no npm registry?)\n%s", err, out)
	}
	// The README promises the example runs on the Node it names (18 and
	// later): npm warns of a package that wants a later one.
	if strings.Contains(string(out), "EBADENGINE") {
		nodeVersion, _ := exec.Command(node, "--version").Output()
		t.Errorf("npm ci under Node %s warns that a pinned package wants another Node:\n%s", strings.TrimSpace(string(nodeVersion)), out)
	}

	nats := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": nats.url()}
	vendorCommand(t, env, "tags", "add", "order", "-step", "1000")
	worker := startVendor(t, "js", env).waitServing()
	runNode := func(url string, args ...string) []byte {
		t.Helper()
		run := exec.CommandContext(ctx, node, append([]string{"leaf.mjs"}, args...)...)
		run.Dir = dir
		run.Env = append(os.Environ(), "NATS_URL="+url)
		out, err := run.Output()
		if err != nil {
			t.Fatalf("node leaf.mjs %v: %v\n%s", args, err, out)
		}
		return out
	}
	readable := strings.Split(strings.TrimSpace(string(runNode(nats.url()))), "\n")
	if len(readable) != 5 || slices.ContainsFunc(readable, func(l string) bool { return len(l) > 200 }) {
		t.Errorf("node leaf.mjs printed %d lines, want 5 short ones:\n%s", len(readable), strings.Join(readable, "\n"))
	}
	got := parseExample(t, runNode(nats.url(), "--json"))
	if got.Layout != "default" || got.Type != "bigint" {
		t.Errorf("against a default vendor: layout %q, IDs of type %s; want default and bigint", got.Layout, got.Type)
	}
	checkExampleIDs(t, got, snowflake.LayoutDefault, worker)
	switch {
	case got.BadCount.Code != 400:
		t.Errorf("a bad count gave %+v, want a 400 read from the headers", got.BadCount)
	case got.UnknownTag.Code != 404 || !strings.Contains(got.UnknownTag.Message, "vendor tags add no-such-tag"):
		t.Errorf("an unknown tag gave %+v, want a 404 saying how to add it", got.UnknownTag)
	case got.Prefetched.IDs != 10000 || got.Prefetched.Unique != 10000 || !got.Prefetched.Ascending || got.Prefetched.Runs != 1:
		t.Errorf("prefetched %+v, want 10000 unique ascending IDs", got.Prefetched)
	}
	if last := readable[len(readable)-1]; !strings.HasSuffix(last, "10000 unique, ascending") {
		t.Errorf("one vendor: the prefetch line is %q, want it to end in \"10000 unique, ascending\"", last)
	}

	// Two vendors, as after the README's second vendor: each hands out its
	// own segments of the tag, so the prefetched IDs may drop where a
	// refill came from the other one. The example says so, without alarm.
	startVendor(t, "js-2", env).waitServing()
	two := parseExample(t, runNode(nats.url(), "--json"))
	if p := two.Prefetched; p.Unique != 10000 || p.Runs < 1 || p.Ascending != (p.Runs == 1) {
		t.Errorf("two vendors: prefetched %+v, want 10000 unique IDs in ascending runs", p)
	}
	lines := string(runNode(nats.url()))
	if strings.Contains(lines, "NOT") {
		t.Errorf("two vendors: node leaf.mjs printed an alarm for what a normal tag does:\n%s", lines)
	}
	// Which vendor answers each refill is the queue group's choice, so the
	// run above may have found one run: check the wording of several too.
	for runs, want := range map[int]string{1: "ascending", 3: "per-vendor segments, ascending within each (3 runs)"} {
		note := exec.CommandContext(ctx, node, "--input-type=module", "-e",
			fmt.Sprintf(`import { orderNote } from "./leaf.mjs"; console.log(orderNote(%d));`, runs))
		note.Dir = dir
		if out, err := note.Output(); err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("orderNote(%d) = %q (%v), want %q", runs, out, err, want)
		}
	}

	// A js53 vendor (its own NATS: its own cluster contract): the example
	// reads the layout from the service info and prints plain numbers.
	nats53 := startNATS(t)
	env53 := map[string]string{"LEAF_NATS_URL": nats53.url(), "LEAF_SNOWFLAKE_LAYOUT": "js53"}
	vendorCommand(t, env53, "tags", "add", "order", "-step", "1000")
	worker53 := startVendor(t, "js53", env53).waitServing()
	got53 := parseExample(t, runNode(nats53.url(), "--json"))
	if got53.Layout != "js53" || got53.Type != "number" {
		t.Errorf("against a js53 vendor: layout %q, IDs of type %s; want js53 and number", got53.Layout, got53.Type)
	}
	checkExampleIDs(t, got53, snowflake.LayoutJS53, worker53)
	if line := string(runNode(nats53.url())); !strings.Contains(line, "3 snowflake IDs (js53, number)") {
		t.Errorf("node leaf.mjs against a js53 vendor printed:\n%s", line)
	}
	report(t, "javascript example (nats.js): text=%d binary=%d bad-count=%d unknown-tag=%d prefetched=%d unique=%d ascending=%v; two vendors: unique=%d runs=%d",
		len(got.Snowflake), len(got.Binary), got.BadCount.Code, got.UnknownTag.Code, got.Prefetched.IDs, got.Prefetched.Unique, got.Prefetched.Ascending,
		two.Prefetched.Unique, two.Prefetched.Runs)
}

// exampleOutput is what node leaf.mjs --json prints. The snowflake IDs are
// JSON strings for the default layout and JSON numbers for js53.
type exampleOutput struct {
	Layout, Type      string
	Snowflake, Binary []json.Number
	BadCount          struct{ Code int }
	UnknownTag        struct {
		Code    int
		Message string
	}
	Prefetched struct {
		IDs, Unique, Runs int
		Ascending         bool
	}
}

func parseExample(t *testing.T, out []byte) exampleOutput {
	t.Helper()
	var got exampleOutput
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node leaf.mjs printed %q: %v", out, err)
	}
	return got
}

// checkExampleIDs checks that every digit survived: the IDs decode in
// layout to the vendor's worker ID, and are unique and ascending.
func checkExampleIDs(t *testing.T, got exampleOutput, layout snowflake.Layout, worker int) {
	t.Helper()
	if len(got.Snowflake) != 3 || len(got.Binary) != 1000 {
		t.Errorf("got %d text and %d binary IDs, want 3 and 1000", len(got.Snowflake), len(got.Binary))
	}
	for _, list := range [][]json.Number{got.Snowflake, got.Binary} {
		ids := make([]int64, len(list))
		for i, s := range list {
			id, err := strconv.ParseInt(string(s), 10, 64)
			if err != nil {
				t.Fatalf("ID %q: %v", s, err)
			}
			if p, err := layout.Decode(id, snowflake.DefaultEpoch); err != nil || p.WorkerID != worker {
				t.Fatalf("ID %s decodes in %s to worker %d (%v), not the vendor's %d: digits lost", s, layout.Name(), p.WorkerID, err, worker)
			}
			ids[i] = id
		}
		if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
			t.Fatalf("IDs not unique and ascending: %v", list[:min(5, len(list))])
		}
	}
}
