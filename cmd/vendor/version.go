package main

import (
	"fmt"
	"io"

	"github.com/leaf-nats/leaf/internal/buildinfo"
)

// baseVersion is the version of a build that carries none: `go build` in a
// tree without its git history, as in the Docker image.
const baseVersion = "0.1.0"

// buildRevision is set by builds that know their commit but do not stamp
// it (the Docker image: -ldflags "-X main.buildRevision=...").
var buildRevision string

type buildInfo = buildinfo.Info

func readBuildInfo() buildInfo { return buildinfo.Read(baseVersion, buildRevision) }

func runVersion(stdout io.Writer) int {
	fmt.Fprintln(stdout, "vendor", readBuildInfo())
	return 0
}
