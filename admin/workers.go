package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/snowflake"
)

// Workers prints every worker ID the buckets hold a record of, and the
// records that cannot be believed.
func (a *Admin) Workers(ctx context.Context, w io.Writer) error {
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

// ResetWorker replaces worker ID id's corrupt or implausible last timestamp
// with one past every live holder's deadline; force resets a plausible one
// too.
func (a *Admin) ResetWorker(ctx context.Context, id int, force bool, w io.Writer) error {
	longest := a.env.LeaseTTL
	if ttl, err := leaseTTL(ctx, a.js); err == nil {
		longest = max(longest, ttl)
	}
	if _, rec, _, err := a.Contract(ctx); err == nil {
		longest = max(longest, rec.LeaseTTL)
		if l, err := snowflake.ParseLayout(rec.Layout); err == nil && id > l.MaxWorkerID() {
			return fmt.Errorf("worker ID %d is not one of this cluster's: its snowflake layout %s has worker IDs 0-%d", id, l.Name(), l.MaxWorkerID())
		}
	}
	was, to, err := kv.ResetWorker(ctx, a.js, id, longest+a.env.MaxSkew, force)
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
