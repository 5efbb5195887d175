package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
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

  show            print the contract, the lease TTL, and how this
                  environment's settings compare
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
	{name: "show", synopsis: "vendor cluster show", flags: func(*flag.FlagSet) runner { return clusterShow }},
	{name: "move-segments", synopsis: "vendor cluster move-segments [-from kv|<postgres URL>] [-lost] [-why TEXT]", flags: clusterMove},
	{name: "set", synopsis: "vendor cluster set [-epoch MS] [-worker-ids FIRST-LAST] [-why TEXT]", flags: clusterSetFlags},
	{name: "set-lease-ttl", synopsis: "vendor cluster set-lease-ttl <duration>", flags: func(*flag.FlagSet) runner { return clusterLeaseTTL }},
	{name: "workers", synopsis: "vendor cluster workers", flags: func(*flag.FlagSet) runner { return clusterWorkers }},
	{name: "reset-worker", synopsis: "vendor cluster reset-worker <id> [-force]", flags: clusterResetWorker},
}

func clusterMove(fs *flag.FlagSet) runner {
	from := fs.String("from", "", "the contract's store: kv, or the Postgres URL of the old database (default: kv when that is the contract's store)")
	lost := fs.Bool("lost", false, "the contract's store is gone: record this environment's store, carrying nothing over")
	why := fs.String("why", "", "what the change is for, kept in the contract's history")
	return func(ctx context.Context, cfg Config, _ []string, w io.Writer) error {
		return moveSegments(ctx, cfg, *from, *lost, *why, w)
	}
}

func clusterSetFlags(fs *flag.FlagSet) runner {
	epoch := fs.Int64("epoch", 0, "new snowflake epoch, Unix ms, earlier than the current one")
	workerIDs := fs.String("worker-ids", "", "new worker-ID range, FIRST-LAST within 0-1023")
	why := fs.String("why", "", "what the change is for, kept in the contract's history")
	return func(ctx context.Context, cfg Config, _ []string, w io.Writer) error {
		if *epoch == 0 && *workerIDs == "" {
			return usagef("set changes -epoch or -worker-ids; give one")
		}
		return clusterSet(ctx, cfg, *epoch, *workerIDs, *why, w)
	}
}

func clusterLeaseTTL(ctx context.Context, cfg Config, pos []string, w io.Writer) error {
	ttl, err := time.ParseDuration(pos[0])
	if err != nil || ttl < time.Second {
		return usagef("lease TTL %q: want a duration of 1s or more, such as 30s", pos[0])
	}
	return setLeaseTTL(ctx, cfg, ttl, w)
}

func clusterResetWorker(fs *flag.FlagSet) runner {
	force := fs.Bool("force", false, "reset a last timestamp that is plausible too")
	return func(ctx context.Context, cfg Config, pos []string, w io.Writer) error {
		return resetWorker(ctx, cfg, pos[0], *force, w)
	}
}

func clusterShow(ctx context.Context, cfg Config, _ []string, w io.Writer) error {
	a, err := openAdmin(cfg, false)
	if err != nil {
		return err
	}
	defer a.Close()
	_, rec, rev, err := a.contract(ctx)
	if errors.Is(err, kv.ErrNoContract) {
		fmt.Fprintf(w, "no cluster contract recorded on %s: the first vendor to start records its settings\n", a.where)
		return nil
	}
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "cluster contract on %s (KV bucket %s, revision %d):\n", a.where, kv.ClusterBucket, rev)
	fmt.Fprintf(tw, "  epoch\t%d (%s)\n", rec.Epoch, time.UnixMilli(rec.Epoch).UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "  layout\t%s\n", rec.Layout)
	fmt.Fprintf(tw, "  worker IDs\t%s\n", rec.WorkerIDs)
	fmt.Fprintf(tw, "  segment store\t%s\n", orDash(rec.Segments))
	fmt.Fprintf(tw, "  recorded by\t%s at %s\n", rec.By, rec.At.Format(time.RFC3339))
	if rec.Why != "" {
		fmt.Fprintf(tw, "  why\t%s\n", rec.Why)
	}
	if ttl, err := leaseTTL(ctx, a.js); err == nil {
		fmt.Fprintf(tw, "  lease TTL\t%v (bucket %s; the longest any vendor may hold: %v)\n", ttl, kv.WorkersBucket, rec.LeaseTTL)
	}
	if end, err := timeRunsOut(rec.Epoch); err == nil {
		fmt.Fprintf(tw, "  time bits run out\t%s\n", end.Format(time.DateOnly))
	}
	tw.Flush()
	want := cfg.terms()
	want.Segments = rec.Segments
	if st, closeStore, err := openStore(ctx, cfg, a.js, false); err == nil {
		if info, err := st.Info(ctx); err == nil {
			want.Segments = storeName(cfg.storeKind(), info)
			if info.MovedTo != "" && want.Segments == rec.Segments {
				fmt.Fprintf(w, "the contract's store is sealed for a move to %s since %s, but the contract still names it: a vendor cluster move-segments was interrupted (or is running); run it again to finish the move\n",
					info.MovedTo, info.MovedAt.Format(time.RFC3339))
			}
		}
		closeStore()
	}
	var mismatch *cluster.MismatchError
	if err := cluster.Check(rec, want); errors.As(err, &mismatch) {
		fmt.Fprintf(w, "this environment's settings differ:%s\n", mismatch.Terms())
		return nil
	}
	fmt.Fprintln(w, "this environment's settings agree with it")
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "- (not recorded yet)"
	}
	return s
}

// timeRunsOut is when 41 bits of milliseconds since epoch run out.
func timeRunsOut(epoch int64) (time.Time, error) {
	return time.UnixMilli(epoch + 1<<snowflake.TimeBits - 1).UTC(), nil
}

func leaseTTL(ctx context.Context, js jetstream.JetStream) (time.Duration, error) {
	s, err := js.Stream(ctx, "KV_"+kv.WorkersBucket)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().Config.MaxAge, nil
}

// moveSegments moves the cluster's segments to this environment's store.
func moveSegments(ctx context.Context, cfg Config, from string, lost bool, why string, w io.Writer) error {
	a, err := openAdmin(cfg, false)
	if err != nil {
		return err
	}
	defer a.Close()
	cs, rec, rev, err := a.contract(ctx)
	if errors.Is(err, kv.ErrNoContract) {
		return errors.New("no cluster contract is recorded, so no store holds the cluster's segments: start the vendors with the store you want")
	}
	if err != nil {
		return err
	}
	to, closeTo, err := openStore(ctx, cfg, a.js, true)
	if err != nil {
		return fmt.Errorf("open this environment's segment store: %w", err)
	}
	defer closeTo()
	toInfo, err := to.Info(ctx)
	if err != nil {
		return fmt.Errorf("read this environment's segment store: %w", err)
	}
	toName := storeName(cfg.storeKind(), toInfo)
	if toName == rec.Segments {
		fmt.Fprintf(w, "the cluster's segments are in %s already\n", toName)
		return nil
	}
	if lost {
		if err := stillThere(ctx, a, cfg, rec.Segments, from); err != nil {
			return err
		}
	}
	moved := 0
	if !lost {
		if moved, err = carryOver(ctx, a, cfg, rec.Segments, from, to, toName, w); err != nil {
			return err
		}
	}
	if toInfo.MovedTo != "" {
		if err := to.Unseal(ctx); err != nil {
			return err
		}
	}
	next := rec
	next.Segments, next.By, next.At = toName, instanceName(), time.Now().UTC()
	next.Why = why
	if next.Why == "" {
		next.Why = "segments moved from " + orDash(rec.Segments)
		if lost {
			next.Why = "the segment store " + orDash(rec.Segments) + " was lost; nothing carried over"
		}
	}
	if _, err := cs.Replace(ctx, next, rev); err != nil {
		return fmt.Errorf("%w (the contract changed meanwhile: run the command again)", err)
	}
	if lost {
		fmt.Fprintf(w, "the cluster's segments are now in %s; nothing was carried over from %s: add each tag again above the IDs it handed out (vendor tags add <tag> -start N)\n", toName, orDash(rec.Segments))
	} else {
		fmt.Fprintf(w, "moved %d tags from %s to %s\n", moved, rec.Segments, toName)
	}
	fmt.Fprintln(w, "vendors still on the old store stop within seconds; restart them with this environment's LEAF_POSTGRES_URL")
	return nil
}

// stillThere refuses -lost for a contract's store that can be reached: its
// max_ids can be carried over, and must be.
func stillThere(ctx context.Context, a *admin, cfg Config, recorded, from string) error {
	src, err := sourceConfig(cfg, recorded, from)
	if err != nil {
		return nil // no way to reach it named: take -lost at its word
	}
	old, closeOld, err := openStore(ctx, src, a.js, false)
	if err != nil {
		return nil
	}
	defer closeOld()
	if info, err := old.Info(ctx); err == nil && storeName(src.storeKind(), info) == recorded {
		return fmt.Errorf("the contract's store %s is not lost: it answers, and its tags' max_ids must be carried over; move without -lost", recorded)
	}
	return nil
}

// sourceConfig is cfg pointed at the contract's store, recorded, as -from
// names it.
func sourceConfig(cfg Config, recorded, from string) (Config, error) {
	kind, _, _ := strings.Cut(recorded, ":")
	src := cfg
	switch {
	case from == "" && kind == kindKV, from == "kv":
		src.PostgresURL = ""
	case strings.HasPrefix(from, "postgres://"), strings.HasPrefix(from, "postgresql://"), strings.Contains(from, "="):
		src.PostgresURL = from
	case from == "":
		return src, usagef("the contract's store is %s: give its URL with -from postgres://...", recorded)
	default:
		return src, usagef("-from %q: want kv or a Postgres URL", from)
	}
	return src, nil
}

// carryOver seals the contract's store (named recorded), opened from from,
// and raises every tag of to to where it was; it returns how many rows it
// carried.
func carryOver(ctx context.Context, a *admin, cfg Config, recorded, from string, to segment.AdminStore, toName string, w io.Writer) (int, error) {
	src, err := sourceConfig(cfg, recorded, from)
	if err != nil {
		return 0, err
	}
	old, closeOld, err := openStore(ctx, src, a.js, false)
	if err != nil {
		return 0, fmt.Errorf("open the store to move from: %w", err)
	}
	defer closeOld()
	info, err := old.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the store to move from: %w", err)
	}
	if name := storeName(src.storeKind(), info); name != recorded {
		return 0, fmt.Errorf("-from names %s, but the contract's store is %s: give the store the vendors use now", name, recorded)
	}
	fmt.Fprintf(w, "sealing %s: it hands out no more segments\n", recorded)
	return segment.Move(ctx, old, to, toName, func(r segment.Row) {
		state := "max_id"
		if r.Retired {
			state = "max_id of the deleted tag"
		}
		fmt.Fprintf(w, "  %s: %s %d\n", r.Tag, state, r.MaxID)
	})
}

// clusterSet changes the epoch or the worker-ID range.
func clusterSet(ctx context.Context, cfg Config, epoch int64, workerIDs, why string, w io.Writer) error {
	a, err := openAdmin(cfg, false)
	if err != nil {
		return err
	}
	defer a.Close()
	cs, rec, rev, err := a.contract(ctx)
	if err != nil {
		return fmt.Errorf("%w: start a vendor with the settings you want; it records them", err)
	}
	next := rec
	if epoch != 0 {
		switch {
		case epoch > rec.Epoch:
			return fmt.Errorf("epoch %d is later than the cluster's %d: every ID would get a smaller time and repeat IDs already handed out; only an earlier epoch is safe", epoch, rec.Epoch)
		case epoch < 0 || time.Now().UnixMilli()-epoch >= 1<<snowflake.TimeBits-1:
			return fmt.Errorf("epoch %d leaves no room in the 41 time bits (69 years from the epoch)", epoch)
		}
		next.Epoch = epoch
	}
	if workerIDs != "" {
		if _, err := (Config{WorkerIDRange: workerIDs}).workerIDRange(); err != nil {
			return usagef("-worker-ids: %v", err)
		}
		next.WorkerIDs = workerIDs
	}
	next.By, next.At, next.Why = instanceName(), time.Now().UTC(), why
	if len(rec.Diff(next)) == 0 {
		fmt.Fprintln(w, "the contract says so already")
		return nil
	}
	if _, err := cs.Replace(ctx, next, rev); err != nil {
		return fmt.Errorf("%w (the contract changed meanwhile: run the command again)", err)
	}
	for _, d := range rec.Diff(next) {
		fmt.Fprintf(w, "%s: %s -> %s\n", d.Term, d.Recorded, d.Wanted)
	}
	fmt.Fprintln(w, "vendors with the old settings stop within seconds; restart them with the new ones (LEAF_EPOCH, LEAF_WORKER_ID_RANGE)")
	return nil
}

// setLeaseTTL changes the TTL of bucket leaf_workers. Safe at any time:
// a lease the server expires early loses its key, but its holder's last
// timestamp is recorded up to its deadline, which the next holder waits
// past.
func setLeaseTTL(ctx context.Context, cfg Config, ttl time.Duration, w io.Writer) error {
	a, err := openAdmin(cfg, false)
	if err != nil {
		return err
	}
	defer a.Close()
	s, err := a.js.Stream(ctx, "KV_"+kv.WorkersBucket)
	if err != nil {
		return fmt.Errorf("bucket %s on %s: %w", kv.WorkersBucket, a.where, err)
	}
	sc := s.CachedInfo().Config
	was := sc.MaxAge
	sc.MaxAge = ttl
	sc.Duplicates = min(2*time.Minute, ttl)
	// The contract keeps the longest lease any vendor may still hold: a
	// claim in buckets created again after a loss waits that long.
	cs, rec, rev, err := a.contract(ctx)
	if err == nil && ttl > rec.LeaseTTL {
		next := rec
		next.LeaseTTL, next.By, next.At, next.Why = ttl, instanceName(), time.Now().UTC(), "lease TTL "+ttl.String()
		if _, err := cs.Replace(ctx, next, rev); err != nil {
			return fmt.Errorf("record the lease TTL in the cluster contract (run the command again): %w", err)
		}
	}
	if _, err := a.js.UpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("change the TTL of bucket %s: %w", kv.WorkersBucket, err)
	}
	fmt.Fprintf(w, "lease TTL of bucket %s: %v -> %v; vendors take it up at their next claim (a restart), and should set LEAF_WORKER_LEASE_TTL=%v too\n",
		kv.WorkersBucket, was, ttl, ttl)
	return nil
}
