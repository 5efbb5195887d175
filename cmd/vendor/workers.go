package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/leaf-nats/leaf/kv"
)

// clusterWorkers is `vendor cluster workers`: every worker ID the buckets
// hold a record of, and the records that cannot be believed.
func clusterWorkers(ctx context.Context, cfg Config, _ []string, w io.Writer) error {
	a, err := openAdmin(cfg, false)
	if err != nil {
		return err
	}
	defer a.Close()
	recs, err := kv.Workers(ctx, a.js)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER_ID\tHELD_BY\tRENEWED\tLAST_TIMESTAMP\tPROBLEM")
	bad := 0
	for _, r := range recs {
		holder, renewed, last, problem := "-", "-", "-", ""
		if r.Held {
			holder, renewed = r.Holder, r.Renewed.UTC().Format(time.RFC3339)
		}
		if r.Recorded {
			last = time.UnixMilli(r.LastMs).UTC().Format(time.RFC3339Nano)
		}
		if r.Problem != nil {
			problem, bad = r.Problem.Error(), bad+1
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.ID, holder, renewed, last, problem)
	}
	tw.Flush()
	if bad > 0 {
		fmt.Fprintf(w, "%d worker ID(s) are passed over by claims; if no vendor used one in the last minutes, repair it with: vendor cluster reset-worker <id>\n", bad)
	}
	return nil
}

// resetWorker is `vendor cluster reset-worker <id> [-force]`.
func resetWorker(ctx context.Context, cfg Config, arg string, force bool, w io.Writer) error {
	id, err := strconv.Atoi(arg)
	if err != nil || id < 0 || id > 1023 {
		return usagef("reset-worker takes a worker ID from 0 to 1023, not %q", arg)
	}
	a, err := openAdmin(cfg, false)
	if err != nil {
		return err
	}
	defer a.Close()
	longest := cfg.WorkerLeaseTTL
	if ttl, err := leaseTTL(ctx, a.js); err == nil {
		longest = max(longest, ttl)
	}
	if _, rec, _, err := a.contract(ctx); err == nil {
		longest = max(longest, rec.LeaseTTL)
	}
	was, to, err := kv.ResetWorker(ctx, a.js, id, longest+cfg.ClockMaxSkew, force)
	if errors.Is(err, kv.ErrPlausible) {
		return fmt.Errorf("%w; with -force it is reset all the same (only if no vendor's clock ran ahead and used it)", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "worker ID %d: last timestamp %q -> %d (%s): claimable once a vendor's clock passes it\n",
		id, was, to, time.UnixMilli(to).UTC().Format(time.RFC3339Nano))
	return nil
}
