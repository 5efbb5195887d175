package deploy

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/leaf-nats/leaf/vending"
)

// markdownFiles returns every .md file of the repository, relative to root,
// leaving out what is not the project's (node_modules, hidden folders) and
// what a run leaves behind (leaf-data).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "leaf-data" || name == "leaf-data.record" || name == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %v", files)
	}
	return files
}

// mdLink is one link of a Markdown file: its target and line.
type mdLink struct {
	target string
	line   int
}

var (
	fenceRe    = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpanRe = regexp.MustCompile("`+[^`]*`+")
	inlineRe   = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDefRe   = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	headingRe  = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlIDRe   = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// parseMarkdown returns a file's links and the anchors its headings (and
// <a name=...> tags) make, as GitHub makes them. Code blocks and code spans
// hold neither.
func parseMarkdown(text string) (links []mdLink, anchors map[string]bool) {
	anchors = map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fenceRe.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if m := headingRe.FindStringSubmatch(line); m != nil {
			slug := slugify(m[2])
			if n := seen[slug]; n > 0 {
				anchors[slug+"-"+strconv.Itoa(n)] = true
			} else {
				anchors[slug] = true
			}
			seen[slug]++
		}
		for _, m := range htmlIDRe.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		bare := codeSpanRe.ReplaceAllString(line, "")
		for _, m := range inlineRe.FindAllStringSubmatch(bare, -1) {
			links = append(links, mdLink{m[1], i + 1})
		}
		if m := refDefRe.FindStringSubmatch(bare); m != nil {
			links = append(links, mdLink{m[1], i + 1})
		}
	}
	return links, anchors
}

// slugify makes a heading's anchor as GitHub does: the text without its
// Markdown (code marks, link targets), lower case, spaces as hyphens, and
// nothing but letters, digits, hyphens and underscores.
func slugify(heading string) string {
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlugify(t *testing.T) {
	for heading, want := range map[string]string{
		"Snowflake mode":                           "snowflake-mode",
		"The environment of each vendor":           "the-environment-of-each-vendor",
		"`LeafVendorDown`":                         "leafvendordown",
		"1. Start leaf-nats beside Leaf":           "1-start-leaf-nats-beside-leaf",
		"Configuration: leaf.properties to LEAF_*": "configuration-leafproperties-to-leaf_",
		"Two JetStreams, one subject space":        "two-jetstreams-one-subject-space",
		"Upgrades and rolling restarts":            "upgrades-and-rolling-restarts",
	} {
		if got := slugify(heading); got != want {
			t.Errorf("slugify(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestMarkdownLinks checks every relative link of every Markdown file of the
// repository: the file or folder it names exists, inside the repository,
// and the anchor it names (#section) is a heading of the page it points to.
// Links to other sites are not fetched.
func TestMarkdownLinks(t *testing.T) {
	files := markdownFiles(t)
	anchorsOf := map[string]map[string]bool{}
	linksOf := map[string][]mdLink{}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		linksOf[f], anchorsOf[f] = parseMarkdown(string(data))
	}
	checked := 0
	for _, f := range files {
		for _, l := range linksOf[f] {
			u, err := url.Parse(l.target)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", f, l.line, l.target, err)
				continue
			}
			if u.Scheme != "" || u.Host != "" {
				continue // another site
			}
			checked++
			target := f
			if u.Path != "" {
				target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(f), u.Path)))
				if target == ".." || strings.HasPrefix(target, "../") {
					t.Errorf("%s:%d: link %q leaves the repository", f, l.line, l.target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", f, l.line, l.target, target)
					continue
				}
			}
			if u.Fragment == "" {
				continue
			}
			anchors, ok := anchorsOf[target]
			if !ok {
				t.Errorf("%s:%d: link %q names an anchor in %s, which is not a Markdown page", f, l.line, l.target, target)
				continue
			}
			if !anchors[u.Fragment] {
				t.Errorf("%s:%d: link %q: %s has no heading #%s", f, l.line, l.target, target, u.Fragment)
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked only %d relative links: is the parser broken?", checked)
	}
}

func TestParseMarkdown(t *testing.T) {
	links, anchors := parseMarkdown("# Title\n\nSee [a](a.md#x) and `[not](b.md)`.\n\n```\n[code](c.md)\n# not a heading\n```\n\n## Title\n\n[ref]: d.md\n<a name=\"e\"></a>\n")
	var got []string
	for _, l := range links {
		got = append(got, l.target)
	}
	if want := []string{"a.md#x", "d.md"}; !slices.Equal(got, want) {
		t.Errorf("links %v, want %v", got, want)
	}
	for _, a := range []string{"title", "title-1", "e"} {
		if !anchors[a] {
			t.Errorf("no anchor %q in %v", a, anchors)
		}
	}
	if anchors["not-a-heading"] {
		t.Error("a line of a code block made an anchor")
	}
}

// docsPages are the pages of docs/ the README leads to (DESIGN.md's list).
var docsPages = []string{
	"docs/concepts.md", "docs/configuration.md", "docs/subjects.md", "docs/clients.md",
	"docs/operations.md", "docs/security.md", "docs/guarantees.md", "docs/regions.md",
	"docs/migrating-from-leaf.md",
}

// TestReadmeIsAnOnRamp keeps the README short enough to read in five
// minutes, leading to every page of docs/, and naming the module a Go
// program imports and the line that gets it.
func TestReadmeIsAnOnRamp(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	if n := strings.Count(readme, "\n"); n > 250 {
		t.Errorf("README.md has %d lines; keep it an on-ramp of at most 250 and move the rest to docs/", n)
	}
	links, _ := parseMarkdown(readme)
	for _, page := range docsPages {
		if !slices.ContainsFunc(links, func(l mdLink) bool { return strings.SplitN(l.target, "#", 2)[0] == page }) {
			t.Errorf("README.md does not link %s", page)
		}
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	module := regexp.MustCompile(`(?m)^module (\S+)`).FindSubmatch(mod)
	if module == nil {
		t.Fatal("go.mod has no module line")
	}
	if want := "go get " + string(module[1]); !strings.Contains(readme, want) {
		t.Errorf("README.md does not say %q", want)
	}
	for _, want := range []string{"go run ./cmd/vendor", "scripts/test.sh"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md does not say %q", want)
		}
	}
}

// readmeGoExample returns the README's Go program (its first go code
// block) and the Prefetch it configures.
func readmeGoExample(t *testing.T) (string, int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindSubmatch(data)
	if m == nil {
		t.Fatal("README.md has no ```go block")
	}
	src := string(m[1])
	if !strings.HasPrefix(src, "package main") && !strings.Contains(src, "\npackage main\n") {
		t.Fatal("the README's Go block is not a program (package main): a reader cannot run it as it is")
	}
	p := regexp.MustCompile(`Prefetch:\s*([0-9_]+)`).FindStringSubmatch(src)
	if p == nil {
		t.Fatal("the README's Go program sets no Prefetch")
	}
	prefetch, err := strconv.Atoi(strings.ReplaceAll(p[1], "_", ""))
	if err != nil {
		t.Fatal(err)
	}
	return src, prefetch
}

// TestReadmeGoExample builds the README's Go program in this module (as a
// reader's module gets it with go get) and runs it twice against a real
// vendor: it prints a snowflake ID and an ID of tag order, and the second
// start skips at most the Prefetch the README sets, which is modest: a
// client's buffer is lost at each exit, so a prefetch of a million burns a
// million IDs per start.
func TestReadmeGoExample(t *testing.T) {
	src, prefetch := readmeGoExample(t)
	if prefetch > 10_000 {
		t.Errorf("the README's Go program prefetches %d IDs: each start burns that many; show a modest one", prefetch)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	// An overlay puts the program in a package of this module that does
	// not exist on disk, so it builds against this checkout.
	overlay := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlay, fmt.Appendf(nil, `{"Replace":{%q:%q}}`, filepath.Join(abs, "cmd", "readme-example", "main.go"), file), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "example")
	build := exec.Command("go", "build", "-overlay", overlay, "-o", bin, "./cmd/readme-example")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's Go program does not build: %v\n%s", err, out)
	}

	v := startRealVendor(t)
	v.command(t, "tags", "add", "order", "-step", "1000")
	var orders []int64
	for range 2 {
		run := exec.Command(bin)
		run.Env = append(os.Environ(), "NATS_URL=nats://"+v.natsAddr)
		out, err := run.CombinedOutput()
		if err != nil {
			t.Fatalf("the README's Go program: %v\n%s", err, out)
		}
		var sf, order int64
		if _, err := fmt.Sscanf(string(out), "snowflake %d order %d", &sf, &order); err != nil || sf <= 0 || order <= 0 {
			t.Fatalf("the README's Go program printed %q, want \"snowflake <id> order <id>\" (%v)", out, err)
		}
		orders = append(orders, order)
	}
	if skipped := orders[1] - orders[0] - 1; skipped < 0 || skipped > int64(prefetch) {
		t.Errorf("run twice, the README's Go program took order %d, then %d: %d skipped, want at most its Prefetch (%d)", orders[0], orders[1], skipped, prefetch)
	}
	t.Logf("run twice: order %d, then %d (Prefetch %d)", orders[0], orders[1], prefetch)
}

// TestDocsDecodeExamples checks every reply of leaf.snowflake.decode the
// pages show against the reply's type: the same fields, so that a page
// cannot show a reply of an older vendor (one without "layout").
func TestDocsDecodeExamples(t *testing.T) {
	typ := reflect.TypeFor[vending.Decoded]()
	want, optional := map[string]bool{}, map[string]bool{}
	for i := range typ.NumField() {
		name, opts, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if strings.Contains(opts, "omitempty") {
			optional[name] = true
		} else {
			want[name] = true
		}
	}
	found := 0
	for _, f := range markdownFiles(t) {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "{") || !strings.Contains(line, `"timestamp_ms":`) {
				continue
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				continue // a description of the fields, not a reply
			}
			found++
			for name := range want {
				if _, ok := got[name]; !ok {
					t.Errorf("%s:%d: the decode reply shown lacks %q, which a vendor sends: %s", f, n+1, name, line)
				}
			}
			for name := range got {
				if !want[name] && !optional[name] {
					t.Errorf("%s:%d: the decode reply shown has %q, which a vendor does not send: %s", f, n+1, name, line)
				}
			}
		}
	}
	if found == 0 {
		t.Error("no page shows a reply of leaf.snowflake.decode")
	}
}

// TestMigratingShowsNoScratchPaths: docs/migrating-from-leaf.md shows its
// commands with the settings of its step 1 (LEAF_HTTP_ADDR=10.0.0.5:8080,
// LEAF_NATS_URL=nats://nats:4222), never a walk-through's scratch
// directory or port (it once showed /tmp/w13walk and 127.0.0.1:18080).
func TestMigratingShowsNoScratchPaths(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "docs", "migrating-from-leaf.md"))
	if err != nil {
		t.Fatal(err)
	}
	addr := regexp.MustCompile(`(?:https?|nats)://[^/\s"'` + "`" + `]+`)
	for n, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "/tmp/") || strings.Contains(line, "/home/") {
			t.Errorf("docs/migrating-from-leaf.md:%d shows a scratch path: %s", n+1, line)
		}
		for _, a := range addr.FindAllString(line, -1) {
			if a != "http://10.0.0.5:8080" && a != "nats://nats:4222" && !strings.HasPrefix(a, "https://github.com") {
				t.Errorf("docs/migrating-from-leaf.md:%d shows %s, not an address of its step 1: %s", n+1, a, line)
			}
		}
	}
}
