// Package buildinfo says which build runs: its version, VCS revision and
// Go version, as the build stamped them or, under go run, as the source
// tree says.
package buildinfo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"time"
)

// Info is what `vendor version` prints, leaf_build_info carries and the
// micro service reports.
type Info struct {
	// Version is semantic (micro requires it): the module's version when
	// built with `go install ...@v1.2.3`, a pseudo-version in a git
	// checkout, else the base version Read is given.
	Version   string
	Revision  string // VCS commit, "+dirty" when modified; "unknown" without VCS
	GoVersion string
}

// Read reads the version and revision a build stamped: base and revision
// when it stamped none (revision: set by -ldflags, "" if not); a binary of
// `go run`, which stamps none, takes the revision of the source tree it runs
// in, when that tree is this module's.
func Read(base, revision string) Info {
	b := Info{Version: base, Revision: "unknown"}
	if revision != "" {
		b.Revision = revision
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion = bi.GoVersion
	if v := strings.TrimPrefix(bi.Main.Version, "v"); v != "" && v != "(devel)" {
		b.Version = v
	}
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "unknown" {
		b.Revision += "+dirty"
	}
	if b.Revision == "unknown" && bi.Main.Path != "" {
		b.Revision = SourceRevision(bi.Main.Path)
	}
	return b
}

// SourceRevision is the git commit of the working directory when it holds
// module path's go.mod (how `go run ./cmd/vendor` runs), "+dirty" when
// modified; "unknown" otherwise.
func SourceRevision(path string) string {
	mod, err := os.ReadFile("go.mod")
	if err != nil || !bytes.HasPrefix(mod, []byte("module "+path+"\n")) {
		return "unknown"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rev, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	r := strings.TrimSpace(string(rev))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		r += "+dirty"
	}
	return r
}

func (b Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s)", b.Version, b.Revision, b.GoVersion)
}
