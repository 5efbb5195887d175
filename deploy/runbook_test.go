package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// runbook returns docs/operations.md.
func runbook(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// runbookSection returns the text of the runbook's section whose heading
// is title, up to the next heading of its level or above.
func runbookSection(t *testing.T, title string) string {
	t.Helper()
	sections := markdownSections(runbook(t))
	for _, s := range sections {
		if s.title == title {
			return s.body
		}
	}
	t.Fatalf("docs/operations.md has no section %q", title)
	return ""
}

// mdSection is a heading of a Markdown page and the text under it, up to
// the next heading of its level or above.
type mdSection struct {
	level       int
	title, body string
}

func markdownSections(text string) []mdSection {
	lines := strings.Split(text, "\n")
	var out []mdSection
	inFence := false
	type open struct{ level, index, line int }
	var heads []open
	for i, line := range lines {
		if fenceRe.MatchString(line) {
			inFence = !inFence
		}
		if inFence {
			continue
		}
		if m := headingRe.FindStringSubmatch(line); m != nil {
			out = append(out, mdSection{level: len(m[1]), title: strings.Trim(m[2], "`")})
			heads = append(heads, open{len(m[1]), len(out) - 1, i})
		}
	}
	for j, h := range heads {
		end := len(lines)
		for _, next := range heads[j+1:] {
			if next.level <= h.level {
				end = next.line
				break
			}
		}
		out[h.index].body = strings.Join(lines[h.line+1:end], "\n")
	}
	return out
}

// alertNames returns the names of the alerts docker/prometheus/leaf-rules.yml
// ships, each once.
func alertNames(t *testing.T) []string {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert string } `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, filepath.Join(root, "docker", "prometheus", "leaf-rules.yml"), &rules)
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && !slices.Contains(names, r.Alert) {
				names = append(names, r.Alert)
			}
		}
	}
	return names
}

// TestEveryAlertHasARunbookEntry checks that the runbook has an entry for
// each alert the shipped rules raise, saying what it means and what to do,
// and none for an alert that no longer exists.
func TestEveryAlertHasARunbookEntry(t *testing.T) {
	alerts := alertNames(t)
	if len(alerts) < 10 {
		t.Fatalf("found only the alerts %v", alerts)
	}
	entries := map[string]string{}
	for _, s := range markdownSections(runbook(t)) {
		if regexp.MustCompile(`^Leaf[A-Za-z0-9]+$`).MatchString(s.title) {
			entries[s.title] = s.body
		}
	}
	for _, a := range alerts {
		body, ok := entries[a]
		if !ok {
			t.Errorf("docs/operations.md has no entry (a heading %q) for the alert %s", a, a)
			continue
		}
		for _, part := range []string{"**What it means.**", "**What to do.**"} {
			i := strings.Index(body, part)
			if i < 0 || len(strings.TrimSpace(body[i+len(part):])) < 40 {
				t.Errorf("the runbook's entry for %s lacks %s and a sentence after it", a, part)
			}
		}
	}
	for name := range entries {
		if !slices.Contains(alerts, name) {
			t.Errorf("docs/operations.md has an entry for %s, which docker/prometheus/leaf-rules.yml does not raise", name)
		}
	}
}
