package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/leaf-nats/leaf/admin"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/storedir"
)

const tagsUsage = `Usage:
  vendor tags add <tag> [-step N] [-start M] [-description D] [-strict [-home REGION]]
  vendor tags list
  vendor tags set-step <tag> <N>
  vendor tags set-mode <tag> <strict|normal> [-home REGION]
  vendor tags raise [<tag>] [-all] [-to N] [-by N] [-step N]   every ID from now on at least N
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

With regions (LEAF_REGION), each region keeps its own store: add a tag in
every region, each in its own block of IDs. A strict tag is led by the
vendors of its home region (-home, default this vendor's region), ordered
across every region while they are connected; give it the same -home in
every region. Through a partition, outside its home region, it answers 503.

raise moves a tag (or every tag, -all) up so that every ID it hands out from
now on is at least -to, or -by above the highest ID its row says it handed
out; it never lowers one. It repairs a row that was written over, and a
store restored with everything that recorded its marks (docs/operations.md,
"Backups and restores"). -step is the step of a row it writes anew because
it cannot be read (a corrupt row, which only -to raises; default 1000); a
row it can read keeps its step.
`

// runTags manages business tags in the configured store.
func runTags(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "tags", tagsUsage, tagCommands, args, stdout, stderr)
}

// tagCommands are the verbs of `vendor tags`.
var tagCommands = []subcommand{
	{Name: "add", Synopsis: "vendor tags add <tag> [-step N] [-start M] [-description D] [-strict [-home REGION]]", Summary: "add a business tag (-strict: IDs increase across the cluster)", Flags: tagsAdd},
	{Name: "list", Synopsis: "vendor tags list", Summary: "list the tags with their mode, next ID, step and last update", Flags: func(*flag.FlagSet) runner { return tagsList }},
	{Name: "set-step", Synopsis: "vendor tags set-step <tag> <N>", Summary: "change a tag's (smallest) step", Positional: true, Flags: func(*flag.FlagSet) runner { return tagsSetStep }},
	{Name: "set-mode", Synopsis: "vendor tags set-mode <tag> <strict|normal> [-home REGION]", Summary: "make a tag strict or normal", Flags: tagsSetMode},
	{Name: "raise", Synopsis: "vendor tags raise [<tag>] [-all] [-to N] [-by N] [-step N]", Summary: "move a tag, or every tag, up (a store restored from a backup)", Flags: tagsRaise},
	{Name: "delete", Synopsis: "vendor tags delete <tag>", Summary: "delete a tag (added again, it continues above its IDs)", Flags: func(*flag.FlagSet) runner { return tagsDelete }},
	{Name: "import", Synopsis: "vendor tags import [-dry-run] [-gap N] <file>", Summary: "import Leaf's leaf_alloc rows", Help: importUsage, Flags: tagsImport},
}

// tagStore opens the store of a subcommand on tag and runs f on it; a tag
// it does not find is said in the store's words.
func tagStore(ctx context.Context, cfg Config, tag string, create bool, f func(ctx context.Context, st segment.AdminStore, where string) error) error {
	if tag != "" {
		if err := segment.ValidateTag(tag); err != nil {
			return usagef("%v", err)
		}
	}
	st, where, closeStore, err := openTagStore(ctx, cfg, create)
	if err != nil {
		return err
	}
	defer closeStore()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = f(ctx, st, where)
	if errors.Is(err, segment.ErrUnknownTag) {
		return fmt.Errorf("tag %q not found in %s (vendor tags list shows the tags)", tag, where)
	}
	return err
}

func checkStep(step int64) error {
	if step < 1 || step > segment.DefaultMaxStep {
		return usagef("step %d is out of range: use 1 to %d (1000 suits most tags)", step, segment.DefaultMaxStep)
	}
	return nil
}

func tagsAdd(fs *flag.FlagSet) runner {
	step := fs.Int64("step", 1000, "IDs per segment (the smallest step the dynamic step may use)")
	start := fs.Int64("start", 0, "first ID of the tag (default: 1, or the first ID of this vendor's region, LEAF_REGION_ID)")
	desc := fs.String("description", "", "what the tag is for")
	strict := fs.Bool("strict", false, "IDs increase across the whole cluster (one vendor at a time serves the tag)")
	home := fs.String("home", "", "with regions, the region whose vendors lead a strict tag (default: this vendor's, LEAF_REGION)")
	return func(ctx context.Context, cfg Config, pos []string, w io.Writer) error {
		if err := checkStep(*step); err != nil {
			return err
		}
		tag := pos[0]
		block := cfg.block()
		if *start == 0 {
			*start = block.First
		}
		if *start < block.First || *start >= block.End {
			return usagef("-start %d is not among this region's IDs, %d to %d (LEAF_REGION_ID)", *start, block.First, block.End-1)
		}
		row := segment.Row{Tag: tag, MaxID: *start, Step: *step, Description: *desc, Strict: *strict}
		if *strict {
			row.Home = cmp.Or(*home, cfg.Region) // led by that region's vendors, ordered across every region
		}
		if err := segment.ValidateRow(row); err != nil {
			return usagef("%v", err)
		}
		handedOut, record, err := cfg.handedOut(tag)
		if err != nil {
			return err
		}
		row.MaxID = max(row.MaxID, handedOut)
		return tagStore(ctx, cfg, tag, true, func(ctx context.Context, st segment.AdminStore, where string) error {
			err := st.Create(ctx, row)
			if errors.Is(err, segment.ErrTagExists) {
				return fmt.Errorf("tag %q already exists in %s (change its step with: vendor tags set-step %s N)", tag, where, tag)
			}
			if err != nil {
				return err
			}
			first := *start
			if rows, lerr := st.List(ctx); lerr == nil {
				for _, r := range rows {
					if r.Tag == tag {
						first = r.MaxID // above -start for a tag deleted before
					}
				}
			}
			fmt.Fprintf(w, "added %s tag %q (step %d, first ID %d) in %s\n", modeName(*strict), tag, *step, first, where)
			switch {
			case first == handedOut && handedOut > *start:
				fmt.Fprintf(w, "IDs of %q up to %d were handed out from an earlier store in %s (recorded in %s): it continues above them\n", tag, handedOut-1, cfg.NATSStoreDir, record)
			case first != *start:
				fmt.Fprintf(w, "the tag was deleted before: it continues from %d, above every ID it had; vendors that still hold some of its earlier segments serve those first\n", first)
			}
			if cfg.Region != "" {
				fmt.Fprintf(w, "in region %s only: each region keeps its own store, so add it in every other region too, with that region's settings: vendor tags add %s -step %d%s\n",
					cfg.Region, tag, *step, strictFlags(row))
			}
			return nil
		})
	}
}

// strictFlags are the flags of tags add that make another region's row of
// r a strict tag with r's home.
func strictFlags(r segment.Row) string {
	if !r.Strict {
		return ""
	}
	return " -strict -home " + r.Home
}

func tagsRaise(fs *flag.FlagSet) runner {
	all := fs.Bool("all", false, "raise every tag")
	to := fs.Int64("to", 0, "every ID handed out from now on is at least this")
	by := fs.Int64("by", 0, "every ID handed out from now on is this far above the highest the tag's row says it handed out")
	step := fs.Int64("step", 1000, "the step of a row written anew (one that was corrupt)")
	return func(ctx context.Context, cfg Config, pos []string, w io.Writer) error {
		switch {
		case (len(pos) == 1) == *all:
			return usagef("raise takes a tag or -all")
		case (*to > 0) == (*by > 0) || *to < 0 || *by < 0:
			return usagef("raise takes -to N or -by N, N positive")
		}
		if err := checkStep(*step); err != nil {
			return err
		}
		tag := ""
		if !*all {
			tag = pos[0]
		}
		return tagStore(ctx, cfg, tag, false, func(ctx context.Context, st segment.AdminStore, where string) error {
			n, err := segment.RaiseAll(ctx, st, segment.Raising{Tag: tag, To: *to, By: *by, Step: *step}, func(r segment.Row, was int64) {
				fmt.Fprintf(w, "tag %q: next ID %d -> %d\n", r.Tag, was, r.MaxID)
			})
			if err == nil {
				fmt.Fprintf(w, "raised %d tag(s) in %s; running vendors serve what they hold in memory, then segments from there on\n", n, where)
			}
			return err
		})
	}
}

func tagsList(ctx context.Context, cfg Config, _ []string, w io.Writer) error {
	return tagStore(ctx, cfg, "", false, func(ctx context.Context, st segment.AdminStore, where string) error {
		rows, err := st.List(ctx)
		if rows != nil || err == nil {
			fmt.Fprintf(w, "tags in %s:\n", where)
			printRows(w, rows)
		}
		return err // the rows that could not be read (kv.ErrCorrupt), if any
	})
}

func tagsSetStep(ctx context.Context, cfg Config, pos []string, w io.Writer) error {
	step, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil {
		return usagef("step %q is not a whole number", pos[1])
	}
	if err := checkStep(step); err != nil {
		return err
	}
	return tagStore(ctx, cfg, pos[0], false, func(ctx context.Context, st segment.AdminStore, where string) error {
		if err := st.SetStep(ctx, pos[0], step); err != nil {
			return err
		}
		fmt.Fprintf(w, "tag %q: step %d in %s (running vendors use it from their next segment)\n", pos[0], step, where)
		return nil
	})
}

func tagsSetMode(fs *flag.FlagSet) runner {
	home := fs.String("home", "", "with regions, the region whose vendors lead a strict tag (default: this vendor's, LEAF_REGION); set the same in every region")
	return func(ctx context.Context, cfg Config, pos []string, w io.Writer) error {
		return setMode(ctx, cfg, pos, cmp.Or(*home, cfg.Region), w)
	}
}

func setMode(ctx context.Context, cfg Config, pos []string, home string, w io.Writer) error {
	if pos[1] != "strict" && pos[1] != "normal" {
		return usagef("mode %q: want strict or normal", pos[1])
	}
	strict := pos[1] == "strict"
	return tagStore(ctx, cfg, pos[0], false, func(ctx context.Context, st segment.AdminStore, where string) error {
		if err := st.SetStrict(ctx, pos[0], strict, home); err != nil {
			return err
		}
		fmt.Fprintf(w, "tag %q: %s in %s (running vendors follow within a minute, at their next read of the tags; no ID repeats meanwhile)\n", pos[0], modeName(strict), where)
		return nil
	})
}

func tagsDelete(ctx context.Context, cfg Config, pos []string, w io.Writer) error {
	return tagStore(ctx, cfg, pos[0], false, func(ctx context.Context, st segment.AdminStore, where string) error {
		if err := st.Delete(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(w, "deleted tag %q from %s (vendors drop it within a minute; added again, it continues after its last ID)\n", pos[0], where)
		return nil
	})
}

func modeName(strict bool) string {
	if strict {
		return "strict"
	}
	return "normal"
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

// openTagStore opens the segment store a vendor with cfg would use (see
// admin.OpenTags).
func openTagStore(ctx context.Context, cfg Config, create bool) (segment.AdminStore, string, func(), error) {
	env, err := cfg.env()
	if err != nil {
		return nil, "", nil, err
	}
	return admin.OpenTags(ctx, env, create, connectHint)
}

// handedOut is how far tag's IDs were handed out from the embedded store
// in LEAF_NATS_STORE_DIR, as the record kept beside it says (0: none, or no
// embedded KV store), and the record's file: a store deleted since does not
// know them.
func (c Config) handedOut(tag string) (int64, string, error) {
	if c.NATSURL != "" || c.storeKind() != kindKV {
		return 0, "", nil
	}
	return storedir.HandedOut(c.NATSStoreDir, tag)
}
