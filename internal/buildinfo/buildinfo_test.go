package buildinfo

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/leaf-nats/leaf/internal/testtool"
)

// `go run ./cmd/vendor version` stamps no revision: it is read from the
// source tree the command runs in, and only from this module's.
func TestSourceRevision(t *testing.T) {
	testtool.Path(t, "git")
	if got := SourceRevision("github.com/leaf-nats/leaf"); got != "unknown" {
		t.Fatalf("in internal/buildinfo (no go.mod): %q", got)
	}
	t.Chdir(filepath.Join("..", ".."))
	if got := SourceRevision("github.com/leaf-nats/leaf"); !regexp.MustCompile(`^[0-9a-f]{40}(\+dirty)?$`).MatchString(got) {
		t.Fatalf("in the module's root: %q, want its commit", got)
	}
	if got := SourceRevision("example.com/other"); got != "unknown" {
		t.Fatalf("another module's tree: %q", got)
	}
}
