package main

import (
	"fmt"
	"io"

	"github.com/leaf-nats/leaf/internal/config"
)

// Config is the vendor's configuration (internal/config).
type Config = config.Config

// loadConfig reads and checks the configuration.
func loadConfig() (Config, error) { return config.Load() }

func usage(w io.Writer) {
	fmt.Fprint(w, `vendor: a leaf-nats worker, vending unique 64-bit IDs over NATS.

Usage:
  vendor
      serve (embedded NATS unless LEAF_NATS_URL is set)
`)
	for _, group := range [][]subcommand{tagCommands, clusterCommands} {
		for _, c := range group {
			fmt.Fprintf(w, "  %s\n      %s\n", c.Synopsis, c.Summary)
		}
	}
	fmt.Fprint(w, `  vendor healthcheck [/readyz|/healthz]
      ask the vendor on LEAF_HTTP_ADDR: exit 0 on 200 OK (the image's health check)
  vendor version
      version, VCS revision and Go version (also --version)
  vendor <command> -h
      a command's flags and what it does

Requests (nats req <subject> <count>; empty body means one ID):
  <prefix>.snowflake          snowflake IDs
  <prefix>.segment.<tag>      segment IDs of business tag <tag>
  <prefix>.snowflake.decode   body: one ID; reply: its time, worker ID and sequence

Leaf's HTTP API, with LEAF_HTTP_LEAF_API=true, on LEAF_HTTP_ADDR:
  GET /api/segment/get/<tag>  GET /api/snowflake/get/<key>

Configuration (environment):
`)
	config.PrintEnv(w)
	fmt.Fprintln(w, `
(an empty default column means unset)`)
}
