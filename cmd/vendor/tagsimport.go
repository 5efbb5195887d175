package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/leafcompat"
	"github.com/leaf-nats/leaf/segment"
)

const importUsage = `Usage: vendor tags import [-dry-run] [-gap N] <file>

Takes Leaf's leaf_alloc rows, so that no ID Leaf handed out is handed out
again: each tag is created, or raised if it exists below, so that its next
ID is Leaf's max_id (plus -gap). Leaf's max_id is past every ID of every
segment a Leaf server took (it is raised, in the transaction that takes a
segment, to the segment's end); a tag already at or above it is left alone,
so running the import again changes nothing.

<file> (- for standard input) is the output of
  mysql -B -e 'select biz_tag,max_id,step,description from leaf_alloc' leaf
tab-separated with its header line, or the same columns as CSV with a
header. Other columns (update_time) are ignored. Every row is checked
before anything is written: a bad row is reported with its line number and
nothing is written.

Flags:
  -dry-run  print the plan, write nothing
  -gap N    start each tag N IDs above Leaf's max_id: room for the IDs a
            Leaf server still running hands out until it is stopped
`

// tagsImport is vendor tags import.
func tagsImport(fs *flag.FlagSet) runner {
	dryRun := fs.Bool("dry-run", false, "print the plan, write nothing")
	gap := fs.Int64("gap", 0, "start each tag N IDs above Leaf's max_id")
	return func(ctx context.Context, cfg Config, pos []string, stdout io.Writer) error {
		if *gap < 0 {
			return usagef("-gap %d: want 0 or more IDs", *gap)
		}
		return importLeaf(ctx, cfg, pos[0], *dryRun, *gap, stdout)
	}
}

// importLeaf imports the dump in file (- for standard input).
func importLeaf(ctx context.Context, cfg Config, file string, dryRun bool, gapIDs int64, stdout io.Writer) error {
	gap := &gapIDs
	pos := []string{file}
	in, name := io.Reader(os.Stdin), "standard input"
	if pos[0] != "-" {
		f, err := os.Open(pos[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in, name = f, pos[0]
	}
	rows, err := leafcompat.ParseLeafAlloc(in)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, r := range rows {
		if r.MaxID > math.MaxInt64/2-*gap {
			return fmt.Errorf("%s: line %d: tag %q: max_id %d plus -gap %d leaves no room for IDs", name, r.Line, r.Tag, r.MaxID, *gap)
		}
	}

	st, where, closeStore, err := openTagStore(ctx, cfg, !dryRun)
	var have []segment.Row
	switch {
	case dryRun && (errors.Is(err, errNoStore) || errors.Is(err, jetstream.ErrBucketNotFound)):
		where = "a store not made yet (the import makes it)"
	case err != nil:
		return err
	default:
		defer closeStore()
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		have, err = st.List(lctx)
		cancel()
		if err != nil {
			return fmt.Errorf("list the tags in %s: %w", where, err)
		}
	}
	plan := leafcompat.PlanImport(rows, have, *gap)
	fmt.Fprintf(stdout, "%d row(s) of Leaf's leaf_alloc from %s, into %s:\n", len(rows), name, where)
	leafcompat.PrintPlan(stdout, plan, *gap)
	var creates, raises int
	for _, s := range plan {
		switch s.Action {
		case "create":
			creates++
		case "raise":
			raises++
		}
	}
	if dryRun {
		fmt.Fprintf(stdout, "dry run: would create %d, raise %d, keep %d; nothing written\n", creates, raises, len(plan)-creates-raises)
		return nil
	}
	for _, s := range plan {
		if s.Action == "keep" {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := st.Raise(wctx, segment.Row{Tag: s.Tag, MaxID: s.NextID, Step: s.Step, Description: s.Desc})
		cancel()
		if err != nil {
			return fmt.Errorf("tag %q (line %d): %w (the tags before it are imported; run the import again to finish, it skips them)", s.Tag, s.Line, err)
		}
	}
	if raises > 0 {
		fmt.Fprintln(stdout, "note: a running vendor that served a raised tag before the import may still hold up to two segments of it from below Leaf's max_id; restart such vendors before Leaf's clients take that tag from them")
	}
	if creates+raises == 0 {
		fmt.Fprintln(stdout, "nothing to change: every tag is at or above Leaf's max_id")
		return nil
	}
	fmt.Fprintf(stdout, "imported: created %d, raised %d, kept %d; vendors serve new tags at their first request and every tag within a minute\n",
		creates, raises, len(plan)-creates-raises)
	return nil
}
