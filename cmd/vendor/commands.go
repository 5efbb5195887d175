package main

import (
	"context"
	"io"

	"github.com/leaf-nats/leaf/admin"
	"github.com/leaf-nats/leaf/internal/cli"
)

// subcommand is one verb of a command group (vendor tags, vendor cluster).
type subcommand = cli.Command[Config]

// runner runs a subcommand with its positional arguments.
type runner = cli.Runner[Config]

var usagef = cli.Usagef

// runGroup runs `vendor <group> <subcommand> ...` (cli.Group.Run).
func runGroup(ctx context.Context, group, usage string, subs []subcommand, args []string, stdout, stderr io.Writer) int {
	g := cli.Group[Config]{
		Binary: "vendor", Name: group, Usage: usage, Commands: subs,
		Config: loadConfig, ConfigHint: "(vendor -h lists the configuration)",
		UsageErrs: []error{admin.ErrUsage},
	}
	return g.Run(ctx, args, stdout, stderr)
}
