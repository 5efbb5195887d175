package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
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

func readBuildInfo() buildInfo {
	b := buildInfo{Version: baseVersion, Revision: "unknown"}
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
	return b
}

func (b buildInfo) String() string {
	return fmt.Sprintf("vendor %s (revision %s, %s)", b.Version, b.Revision, b.GoVersion)
}

func runVersion(stdout io.Writer) int {
	fmt.Fprintln(stdout, readBuildInfo())
	return 0
}
