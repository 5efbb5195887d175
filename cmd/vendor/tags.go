package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leaf-nats/leaf/segment"
)

const tagsUsage = `Usage:
  vendor tags add <tag> [-step N] [-start M] [-description D] [-strict]
  vendor tags list
  vendor tags set-step <tag> <N>
  vendor tags set-mode <tag> <strict|normal>
  vendor tags delete <tag>
  vendor tags import [-dry-run] [-gap N] <file>   Leaf's leaf_alloc rows (import -h)

Tags live in Postgres when LEAF_POSTGRES_URL is set, else in the JetStream KV
bucket leaf_segments: on LEAF_NATS_URL, on a vendor running with the embedded
server at LEAF_NATS_LISTEN, or in LEAF_NATS_STORE_DIR when none runs.
A tag is 1-128 letters, digits, '_', '-' and inner '.'; its IDs are served on
<prefix>.segment.<tag>.

A strict tag's IDs increase across the whole cluster: a reply received
before another request is sent holds only IDs below that request's, whichever
vendors answer. One vendor at a time leads the tag and serves it; the others
pass its requests on. set-mode switches a tag either way without repeating an
ID; running vendors follow within a minute (their next read of the tags), and
the cluster-wide order holds for requests sent after that.
`

// maxTableStep bounds a tag's step: Leaf's dynamic-step cap.
const maxTableStep = 1_000_000

// runTags manages business tags in the configured store.
func runTags(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "vendor tags: add, list, set-step, delete or import?\n\n%s", tagsUsage)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, tagsUsage)
		return 0
	}
	cfg, err := loadConfig()
	if err != nil {
		fmt.Fprintf(stderr, "vendor: %v\n(vendor -h lists the configuration)\n", err)
		return 2
	}
	err = tagsCommand(ctx, cfg, args, stdout)
	var usageErr usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usageErr):
		fmt.Fprintf(stderr, "vendor tags: %v\n\n%s", err, tagsUsage)
		return 2
	default:
		fmt.Fprintf(stderr, "vendor tags: %v\n", err)
		return 1
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

func tagsCommand(ctx context.Context, cfg Config, args []string, stdout io.Writer) error {
	if args[0] == "import" {
		return tagsImport(ctx, cfg, args[1:], os.Stdin, stdout)
	}
	fs := flag.NewFlagSet("vendor tags "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	step := fs.Int64("step", 1000, "IDs per segment (the smallest step the dynamic step may use)")
	start := fs.Int64("start", 1, "first ID of the tag")
	desc := fs.String("description", "", "what the tag is for")
	strict := fs.Bool("strict", false, "IDs increase across the whole cluster (one vendor at a time serves the tag)")
	synopsis := map[string]string{
		"add":      "vendor tags add <tag> [-step N] [-start M] [-description D] [-strict]",
		"list":     "vendor tags list",
		"set-step": "vendor tags set-step <tag> <N>",
		"set-mode": "vendor tags set-mode <tag> <strict|normal>",
		"delete":   "vendor tags delete <tag>",
	}
	use, ok := synopsis[args[0]]
	if !ok {
		return usagef("unknown subcommand %q", args[0])
	}
	var pos []string
	var err error
	if args[0] == "set-step" {
		pos = args[1:] // no flags: the step may look like one (-5)
		if len(pos) == 1 && (pos[0] == "-h" || pos[0] == "--help") {
			fmt.Fprintf(stdout, "Usage: %s\n", use)
			return flag.ErrHelp
		}
	} else if pos, err = parseInterspersed(fs, args[1:]); errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: %s\n", use)
		if args[0] == "add" {
			fmt.Fprintln(stdout, "\nFlags:")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return err
	} else if err != nil {
		return usagef("%v; usage: %s", err, use)
	}
	if want := strings.Count(use, "<"); len(pos) != want {
		return usagef("%s takes %d argument(s), got %d; usage: %s", args[0], want, len(pos), use)
	}
	if len(pos) > 0 {
		if err := segment.ValidateTag(pos[0]); err != nil {
			return usagef("%v", err)
		}
	}
	if args[0] == "set-step" {
		if *step, err = strconv.ParseInt(pos[1], 10, 64); err != nil {
			return usagef("step %q is not a whole number; usage: %s", pos[1], use)
		}
	}
	if args[0] == "set-mode" {
		switch pos[1] {
		case "strict", "normal":
			*strict = pos[1] == "strict"
		default:
			return usagef("mode %q: want strict or normal; usage: %s", pos[1], use)
		}
	}
	if *step < 1 || *step > maxTableStep {
		return usagef("step %d is out of range: use 1 to %d (1000 suits most tags)", *step, maxTableStep)
	}
	if *start < 1 {
		return usagef("start %d: IDs are positive, want at least 1", *start)
	}
	if len(*desc) > segment.MaxDescriptionLen {
		return usagef("description is %d bytes; at most %d", len(*desc), segment.MaxDescriptionLen)
	}

	st, where, closeStore, err := openTagStore(ctx, cfg, args[0] == "add")
	if err != nil {
		return err
	}
	defer closeStore()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	switch args[0] {
	case "add":
		err = st.Create(ctx, segment.Row{Tag: pos[0], MaxID: *start, Step: *step, Description: *desc, Strict: *strict})
		if errors.Is(err, segment.ErrTagExists) {
			return fmt.Errorf("tag %q already exists in %s (change its step with: vendor tags set-step %s N)", pos[0], where, pos[0])
		}
		if err == nil {
			first := *start
			if rows, lerr := st.List(ctx); lerr == nil {
				for _, r := range rows {
					if r.Tag == pos[0] {
						first = r.MaxID // above -start for a tag deleted before
					}
				}
			}
			fmt.Fprintf(stdout, "added %s tag %q (step %d, first ID %d) in %s\n", modeName(*strict), pos[0], *step, first, where)
		}
	case "list":
		var rows []segment.Row
		if rows, err = st.List(ctx); err == nil {
			fmt.Fprintf(stdout, "tags in %s:\n", where)
			printRows(stdout, rows)
		}
	case "set-step":
		err = st.SetStep(ctx, pos[0], *step)
		if err == nil {
			fmt.Fprintf(stdout, "tag %q: step %d in %s (running vendors use it from their next segment)\n", pos[0], *step, where)
		}
	case "set-mode":
		err = st.SetStrict(ctx, pos[0], *strict)
		if err == nil {
			fmt.Fprintf(stdout, "tag %q: %s in %s (running vendors follow within a minute, at their next read of the tags; no ID repeats meanwhile)\n", pos[0], modeName(*strict), where)
		}
	case "delete":
		err = st.Delete(ctx, pos[0])
		if err == nil {
			fmt.Fprintf(stdout, "deleted tag %q from %s (vendors drop it within a minute; added again, it continues after its last ID)\n", pos[0], where)
		}
	}
	if errors.Is(err, segment.ErrUnknownTag) {
		return fmt.Errorf("tag %q not found in %s (vendor tags list shows the tags)", pos[0], where)
	}
	return err
}

func modeName(strict bool) string {
	if strict {
		return "strict"
	}
	return "normal"
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

func printRows(w io.Writer, rows []segment.Row) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TAG\tMODE\tMAX_ID\tSTEP\tUPDATED\tDESCRIPTION")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", r.Tag, modeName(r.Strict), r.MaxID, r.Step, r.Updated.Local().Format(time.DateTime), r.Description)
	}
	tw.Flush()
	if len(rows) == 0 {
		fmt.Fprintln(w, "(no tags: add one with: vendor tags add <tag> -step 1000)")
	}
}

// openTagStore opens the segment store a vendor with cfg would use,
// checked against the cluster contract when a NATS is there to read it
// from. Only add creates a store that does not exist yet.
func openTagStore(ctx context.Context, cfg Config, create bool) (segment.AdminStore, string, func(), error) {
	a, err := openAdmin(cfg, create && cfg.storeKind() == kindKV)
	if errors.Is(err, errNoStore) && cfg.storeKind() == kindPostgres {
		// No NATS to read a contract from: no vendor has run here. Say
		// so, since nothing checked that this is the cluster's database.
		st, closeStore, err := openStore(ctx, cfg, nil, false)
		return st, "Postgres (not checked against a cluster contract: LEAF_NATS_URL is unset and " + cfg.NATSStoreDir +
			" holds no vendor's store; set LEAF_NATS_URL as the vendors have it to check)", closeStore, err
	}
	if err != nil {
		return nil, "", nil, err
	}
	st, where, closeStore, err := a.store(ctx, cfg, create)
	if err != nil {
		a.Close()
		return nil, "", nil, err
	}
	return st, where, func() { closeStore(); a.Close() }, nil
}
