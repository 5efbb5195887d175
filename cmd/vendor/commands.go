package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/leaf-nats/leaf/admin"
)

// subcommand is one verb of a command group (vendor tags, vendor cluster).
type subcommand struct {
	name string
	// synopsis is its usage line; each <argument> in it is a positional
	// argument it takes, and each of its flags is named in it.
	synopsis string
	// summary says what it does in a few words, for vendor -h.
	summary string
	// positional: its arguments may look like flags (set-step <tag> -5),
	// so it takes no flags.
	positional bool
	// help, when set, is what -h prints, in place of the synopsis and
	// the flags.
	help string
	// flags defines its flags on fs and returns what runs it.
	flags func(fs *flag.FlagSet) runner
}

// runner runs a subcommand with its positional arguments.
type runner func(ctx context.Context, cfg Config, pos []string, w io.Writer) error

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// runGroup runs `vendor <group> <subcommand> ...`: its help, the
// configuration, the subcommand. It returns the exit code: 0 done, 1
// failed, 2 a mistake in the command line (which it says, with the
// subcommand's usage line).
func runGroup(ctx context.Context, group, usage string, subs []subcommand, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "vendor %s: which subcommand? %s\n\n%s", group, names(subs), usage)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	sub, ok := find(subs, args[0])
	if !ok {
		fmt.Fprintf(stderr, "vendor %s: unknown subcommand %q: want %s\n(vendor %s -h explains each)\n", group, args[0], names(subs), group)
		return 2
	}
	pos, run, err := sub.parse(args[1:], stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		var cfg Config
		if cfg, err = loadConfig(); err != nil {
			fmt.Fprintf(stderr, "vendor: %v\n(vendor -h lists the configuration)\n", err)
			return 2
		}
		err = run(ctx, cfg, pos, stdout)
	}
	var usageErr usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usageErr), errors.Is(err, admin.ErrUsage):
		fmt.Fprintf(stderr, "vendor %s: %v\nusage: %s\n", group, err, sub.synopsis)
		return 2
	default:
		fmt.Fprintf(stderr, "vendor %s: %v\n", group, err)
		return 1
	}
}

func find(subs []subcommand, name string) (subcommand, bool) {
	for _, s := range subs {
		if s.name == name {
			return s, true
		}
	}
	return subcommand{}, false
}

// names lists the subcommands: "add, list or delete".
func names(subs []subcommand) string {
	var b strings.Builder
	for i, s := range subs {
		switch {
		case i == 0:
		case i == len(subs)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(s.name)
	}
	return b.String()
}

// parse parses the subcommand's flags and counts its positional arguments;
// -h prints its usage and flags (flag.ErrHelp).
func (s subcommand) parse(args []string, stdout io.Writer) ([]string, runner, error) {
	fs := flag.NewFlagSet("vendor "+s.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	run := s.flags(fs)
	var pos []string
	var err error
	if s.positional {
		pos = args
		if len(pos) == 1 && (pos[0] == "-h" || pos[0] == "--help") {
			err = flag.ErrHelp
		}
	} else {
		pos, err = parseInterspersed(fs, args)
	}
	if errors.Is(err, flag.ErrHelp) && s.help != "" {
		fmt.Fprint(stdout, s.help)
		return nil, nil, err
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: %s\n", s.synopsis)
		if n := countFlags(fs); n > 0 {
			fmt.Fprintln(stdout, "\nFlags:")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, usagef("%v", err)
	}
	if want, most := arguments(s.synopsis); len(pos) < want || len(pos) > most {
		return nil, nil, usagef("%s takes %d argument(s), got %d", s.name, want, len(pos))
	}
	return pos, run, nil
}

// arguments counts the <arguments> of a synopsis: those in a [-flag ...]
// group are the flag's value, those in other [brackets] optional, the
// others required.
func arguments(synopsis string) (required, most int) {
	depth, flagDepth := 0, 0 // flagDepth: the depth of the [-flag group we are in, 0 if none
	for i := 0; i < len(synopsis); i++ {
		switch c := synopsis[i]; {
		case c == '[':
			depth++
			if flagDepth == 0 && i+1 < len(synopsis) && synopsis[i+1] == '-' {
				flagDepth = depth
			}
		case c == ']':
			if depth == flagDepth {
				flagDepth = 0
			}
			depth--
		case c == '<' && flagDepth == 0:
			most++
			if depth == 0 {
				required++
			}
		}
	}
	return required, most
}

func countFlags(fs *flag.FlagSet) int {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n
}

// parseInterspersed parses flags before, between and after positional
// arguments, so that `tags add order -step 1000` works.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}
