// Package testtool holds what the tests of several packages share. It
// finds the commands tests run (promtool, chromium, node) the one way:
// scripts/test.sh installs them, so a test without one fails under CI=true
// and skips elsewhere, saying how to get it. It picks the seeds of the
// seeded simulations (SimSeeds), and holds the values a misdirected reply
// writes into a bucket (ForeignValues).
package testtool

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Path returns the path of the first of names found in PATH.
func Path(t testing.TB, names ...string) string {
	t.Helper()
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	what := strings.Join(names, " or ")
	if os.Getenv("CI") == "true" {
		t.Fatalf("no %s: run scripts/test.sh, which installs it", what)
	}
	t.Skipf("no %s (scripts/test.sh installs it)", what)
	return ""
}
