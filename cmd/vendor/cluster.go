package main

import (
	"context"
	"flag"
	"io"
	"strconv"
	"time"

	"github.com/leaf-nats/leaf/admin"
	"github.com/leaf-nats/leaf/snowflake"
)

const clusterUsage = `Usage:
  vendor cluster show
  vendor cluster move-segments [-from kv|<postgres URL>] [-lost] [-why TEXT]
  vendor cluster set [-epoch MS] [-worker-ids FIRST-LAST] [-why TEXT]
  vendor cluster set-lease-ttl <duration>
  vendor cluster workers
  vendor cluster reset-worker <id> [-force]

Vendors that share a NATS cluster must agree on what makes IDs unique: the
snowflake epoch and layout, the worker-ID range and the segment store. The
first vendor records this contract in KV bucket leaf_cluster; every vendor
checks it before it vends and every few seconds while it runs, and one that
disagrees stops with a message naming both values. These commands change it
on purpose. They act on the NATS and the segment store this command's
environment names, as a vendor's would.

  show            print the contract, the lease TTL, how this environment
                  compares, and the regions seen (IDs, vendors, reachable)
  move-segments   move the segments from the contract's store (-from: kv,
                  or the old database's URL) to this environment's
                  (LEAF_POSTGRES_URL, or the KV bucket when it is empty):
                  the old store stops handing out segments, every tag's
                  max_id is carried over, then the contract names the new
                  store. Vendors still on the old store stop; restart them
                  with the new settings. -lost records this environment's
                  store when the contract's is gone, carrying nothing over:
                  add the tags again above the IDs they handed out.
  set             change the epoch (earlier only: a later one would repeat
                  IDs) or the worker-ID range (keep clusters' ranges
                  disjoint). Every vendor with the old value stops: restart
                  them with the new one.
  set-lease-ttl   change the worker-ID lease TTL, kept by bucket
                  leaf_workers (LEAF_WORKER_LEASE_TTL only applies to a
                  bucket a vendor creates). Vendors take it up at their
                  next claim.
  workers         list every worker ID's lease and last timestamp, and
                  the records claims pass over (corrupt, or implausibly far
                  in the future)
  reset-worker    replace a worker ID's corrupt or implausible last
                  timestamp with one past every live holder's deadline, so
                  that it can be claimed again (-force: also a plausible one)
`

// runCluster runs `vendor cluster ...`.
func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return runGroup(ctx, "cluster", clusterUsage, clusterCommands, args, stdout, stderr)
}

// clusterCommands are the verbs of `vendor cluster`.
var clusterCommands = []subcommand{
	{Name: "show", Synopsis: "vendor cluster show", Summary: "the cluster contract, how this environment compares, the regions",
		Flags: adminRunner(func(ctx context.Context, a *admin.Admin, _ []string, w io.Writer) error { return a.Show(ctx, w) })},
	{Name: "move-segments", Synopsis: "vendor cluster move-segments [-from kv|<postgres URL>] [-lost] [-why TEXT]", Summary: "move the segments to the configured store", Flags: clusterMove},
	{Name: "set", Synopsis: "vendor cluster set [-epoch MS] [-worker-ids FIRST-LAST] [-why TEXT]", Summary: "change the contract's epoch or worker-ID range", Flags: clusterSetFlags},
	{Name: "set-lease-ttl", Synopsis: "vendor cluster set-lease-ttl <duration>", Summary: "change the worker-ID lease TTL", Flags: adminRunner(clusterLeaseTTL)},
	{Name: "workers", Synopsis: "vendor cluster workers", Summary: "every worker ID's lease and last timestamp",
		Flags: adminRunner(func(ctx context.Context, a *admin.Admin, _ []string, w io.Writer) error { return a.Workers(ctx, w) })},
	{Name: "reset-worker", Synopsis: "vendor cluster reset-worker <id> [-force]", Summary: "repair a worker ID's corrupt or implausible last timestamp", Flags: clusterResetWorker},
}

func clusterMove(fs *flag.FlagSet) runner {
	from := fs.String("from", "", "the contract's store: kv, or the Postgres URL of the old database (default: kv when that is the contract's store)")
	lost := fs.Bool("lost", false, "the contract's store is gone: record this environment's store, carrying nothing over")
	why := fs.String("why", "", "what the change is for, kept in the contract's history")
	return withAdmin(func(ctx context.Context, a *admin.Admin, _ []string, w io.Writer) error {
		return a.MoveSegments(ctx, *from, *lost, *why, w)
	})
}

func clusterSetFlags(fs *flag.FlagSet) runner {
	epoch := fs.Int64("epoch", 0, "new snowflake epoch, Unix ms, earlier than the current one")
	workerIDs := fs.String("worker-ids", "", "new worker-ID range, FIRST-LAST within 0-1023")
	why := fs.String("why", "", "what the change is for, kept in the contract's history")
	return withAdmin(func(ctx context.Context, a *admin.Admin, _ []string, w io.Writer) error {
		if *epoch == 0 && *workerIDs == "" {
			return usagef("set changes -epoch or -worker-ids; give one")
		}
		return a.SetTerms(ctx, *epoch, *workerIDs, *why, w)
	})
}

func clusterLeaseTTL(ctx context.Context, a *admin.Admin, pos []string, w io.Writer) error {
	ttl, err := time.ParseDuration(pos[0])
	if err != nil || ttl < time.Second {
		return usagef("lease TTL %q: want a duration of 1s or more, such as 30s", pos[0])
	}
	return a.SetLeaseTTL(ctx, ttl, w)
}

func clusterResetWorker(fs *flag.FlagSet) runner {
	force := fs.Bool("force", false, "reset a last timestamp that is plausible too")
	return withAdmin(func(ctx context.Context, a *admin.Admin, pos []string, w io.Writer) error {
		id, err := strconv.Atoi(pos[0])
		if err != nil || id < 0 || id > snowflake.MaxWorkerID {
			return usagef("reset-worker takes a worker ID from 0 to %d, not %q", snowflake.MaxWorkerID, pos[0])
		}
		return a.ResetWorker(ctx, id, *force, w)
	})
}

// withAdmin runs f on the admin of the command's environment.
func withAdmin(f func(ctx context.Context, a *admin.Admin, pos []string, w io.Writer) error) runner {
	return func(ctx context.Context, cfg Config, pos []string, w io.Writer) error {
		env, err := cfg.AdminEnv()
		if err != nil {
			return err
		}
		a, err := admin.Open(env, false, connectHint)
		if err != nil {
			return err
		}
		defer a.Close()
		return f(ctx, a, pos, w)
	}
}

// adminRunner is a subcommand with no flags that runs f on the admin.
func adminRunner(f func(ctx context.Context, a *admin.Admin, pos []string, w io.Writer) error) func(*flag.FlagSet) runner {
	return func(*flag.FlagSet) runner { return withAdmin(f) }
}
