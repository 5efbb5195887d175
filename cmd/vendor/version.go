package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"time"
)

// baseVersion is the version of a build that carries none: `go build` in a
// tree without its git history, as in the Docker image.
const baseVersion = "0.1.0"

// buildInfo is what `vendor version` prints, leaf_build_info carries and
// the micro service reports.
type buildInfo struct {
	// Version is semantic (micro requires it): the module's version when
	// built with `go install ...@v1.2.3`, a pseudo-version in a git
	// checkout, else baseVersion.
	Version   string
	Revision  string // VCS commit, "+dirty" when modified; "unknown" without VCS
	GoVersion string
}

// buildRevision is set by builds that know their commit but do not stamp
// it (the Docker image: -ldflags "-X main.buildRevision=...").
var buildRevision string

// readBuildInfo reads the version and revision a build stamped; a binary of
// `go run`, which stamps none, takes the revision of the source tree it runs
// in, when that tree is this module's.
func readBuildInfo() buildInfo {
	b := buildInfo{Version: baseVersion, Revision: "unknown"}
	if buildRevision != "" {
		b.Revision = buildRevision
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
		b.Revision = sourceRevision(bi.Main.Path)
	}
	return b
}

// sourceRevision is the git commit of the working directory when it holds
// module path's go.mod (how `go run ./cmd/vendor` runs), "+dirty" when
// modified; "unknown" otherwise.
func sourceRevision(path string) string {
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

func (b buildInfo) String() string {
	return fmt.Sprintf("vendor %s (revision %s, %s)", b.Version, b.Revision, b.GoVersion)
}

func runVersion(stdout io.Writer) int {
	fmt.Fprintln(stdout, readBuildInfo())
	return 0
}
