package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/admin"
	"github.com/leaf-nats/leaf/leafcompat"
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
func importLeaf(ctx context.Context, cfg Config, file string, dryRun bool, gap int64, stdout io.Writer) error {
	in, name := io.Reader(os.Stdin), "standard input"
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		in, name = f, file
	}
	rows, err := leafcompat.ParseLeafAlloc(in)
	if err == nil {
		err = leafcompat.CheckGap(rows, gap)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	st, where, closeStore, err := openTagStore(ctx, cfg, !dryRun)
	switch {
	case dryRun && (errors.Is(err, admin.ErrNoStore) || errors.Is(err, jetstream.ErrBucketNotFound)):
		st, where = nil, "a store not made yet (the import makes it)"
	case err != nil:
		return err
	default:
		defer closeStore()
	}
	return leafcompat.Import(ctx, leafcompat.Importing{Rows: rows, From: name, Gap: gap, DryRun: dryRun}, st, where, stdout)
}
