package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// testName is a Go test, benchmark or fuzz target a page names.
var testName = regexp.MustCompile("`((?:Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*)`")

// TestGuaranteesNameRealTests checks that every test docs/guarantees.md
// names is a function of a _test.go file in the module, so that a renamed
// or removed test cannot leave a promise without the test that backs it.
func TestGuaranteesNameRealTests(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(root, "docs", "guarantees.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range testName.FindAllStringSubmatch(string(page), -1) {
		named[m[1]] = true
	}
	if len(named) < 20 {
		t.Fatalf("docs/guarantees.md names %d tests; its table names one or more per fault", len(named))
	}
	defined := definedTests(t)
	for name := range named {
		if !defined[name] {
			t.Errorf("docs/guarantees.md names %s, which no _test.go file defines", name)
		}
	}
}

// definedTests returns the names of the test, benchmark and fuzz functions
// of every _test.go file under the module's root.
func definedTests(t *testing.T) map[string]bool {
	t.Helper()
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*)\(`)
	defined := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(src, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return defined
}
