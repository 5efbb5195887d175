package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/workerid"
)

// Show prints the cluster contract, the lease TTL, how the environment's
// settings compare, and the regions seen from here.
func (a *Admin) Show(ctx context.Context, w io.Writer) error {
	if err := a.showContract(ctx, w); err != nil {
		return err
	}
	return a.Regions(ctx, w)
}

// showContract prints the cluster contract, the lease TTL, and how the
// environment's settings compare.
func (a *Admin) showContract(ctx context.Context, w io.Writer) error {
	_, rec, rev, err := a.Contract(ctx)
	if errors.Is(err, kv.ErrNoContract) {
		fmt.Fprintf(w, "no cluster contract recorded on %s: the first vendor to start records its settings\n", a.where)
		return nil
	}
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "cluster contract on %s (KV bucket %s, revision %d):\n", a.where, a.js.Cluster, rev)
	fmt.Fprintf(tw, "  epoch\t%d (%s)\n", rec.Epoch, time.UnixMilli(rec.Epoch).UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "  layout\t%s\n", layoutLine(rec.Layout))
	fmt.Fprintf(tw, "  worker IDs\t%s\n", rec.WorkerIDs)
	fmt.Fprintf(tw, "  segment store\t%s\n", orDash(rec.Segments))
	fmt.Fprintf(tw, "  recorded by\t%s at %s\n", rec.By, rec.At.Format(time.RFC3339))
	if rec.Why != "" {
		fmt.Fprintf(tw, "  why\t%s\n", rec.Why)
	}
	if ttl, err := leaseTTL(ctx, a.js); err == nil {
		fmt.Fprintf(tw, "  lease TTL\t%v (bucket %s; the longest any vendor may hold: %v)\n", ttl, a.js.Workers, rec.LeaseTTL)
	}
	if end, err := timeRunsOut(rec.Epoch, rec.Layout); err == nil {
		fmt.Fprintf(tw, "  time bits run out\t%s\n", end.Format(time.DateOnly))
	}
	tw.Flush()
	want := a.env.Terms
	want.Segments = rec.Segments
	if st, closeStore, err := OpenStore(ctx, a.env.PostgresURL, a.env.KVReplicas, a.js, false); err == nil {
		if info, err := st.Info(ctx); err == nil {
			want.Segments = a.env.StoreKind() + ":" + info.ID
			if info.MovedTo != "" && want.Segments == rec.Segments {
				fmt.Fprintf(w, "the contract's store is sealed for a move to %s since %s, but the contract still names it: "+
					"a vendor cluster move-segments was interrupted (or is running); run it again to finish the move\n",
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

// timeRunsOut is the last millisecond the time bits of the contract's
// layout hold after epoch.
func timeRunsOut(epoch int64, layout string) (time.Time, error) {
	l, err := snowflake.ParseLayout(layout)
	if err != nil {
		return time.Time{}, err
	}
	return l.Ends(epoch).Add(-time.Millisecond), nil
}

// layoutLine shows a contract's layout with its LEAF_SNOWFLAKE_LAYOUT name
// and what it holds.
func layoutLine(layout string) string {
	l, err := snowflake.ParseLayout(layout)
	if err != nil {
		return layout + " (not a layout this build vends in)"
	}
	return fmt.Sprintf("%s (LEAF_SNOWFLAKE_LAYOUT=%s: %d worker IDs, %d IDs per ms each)", layout, l.Name(), l.MaxWorkerID()+1, l.MaxSequence()+1)
}

func leaseTTL(ctx context.Context, js kv.JS) (time.Duration, error) {
	s, err := js.Stream(ctx, "KV_"+js.Workers)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().Config.MaxAge, nil
}

// MoveSegments moves the cluster's segments to the environment's store:
// from the contract's store (from: kv, or the old database's URL), whose
// rows it carries over, or, lost, from none.
func (a *Admin) MoveSegments(ctx context.Context, from string, lost bool, why string, w io.Writer) error {
	cs, rec, rev, err := a.Contract(ctx)
	if errors.Is(err, kv.ErrNoContract) {
		return errors.New("no cluster contract is recorded, so no store holds the cluster's segments: start the vendors with the store you want")
	}
	if err != nil {
		return err
	}
	to, closeTo, err := OpenStore(ctx, a.env.PostgresURL, a.env.KVReplicas, a.js, true)
	if err != nil {
		return fmt.Errorf("open this environment's segment store: %w", err)
	}
	defer closeTo()
	toInfo, err := to.Info(ctx)
	if err != nil {
		return fmt.Errorf("read this environment's segment store: %w", err)
	}
	toName := a.env.StoreKind() + ":" + toInfo.ID
	if toName == rec.Segments {
		fmt.Fprintf(w, "the cluster's segments are in %s already\n", toName)
		return nil
	}
	if lost {
		if err := a.stillThere(ctx, rec.Segments, from); err != nil {
			return err
		}
	}
	moved := 0
	if !lost {
		if moved, err = a.carryOver(ctx, rec.Segments, from, to, toName, w); err != nil {
			return err
		}
	}
	if toInfo.MovedTo != "" {
		if err := to.Unseal(ctx); err != nil {
			return err
		}
	}
	next := rec
	next.Segments, next.By, next.At = toName, a.env.Self, time.Now().UTC()
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
		fmt.Fprintf(w, "the cluster's segments are now in %s; nothing was carried over from %s: "+
			"add each tag again above the IDs it handed out (vendor tags add <tag> -start N)\n", toName, orDash(rec.Segments))
	} else {
		fmt.Fprintf(w, "moved %d tags from %s to %s\n", moved, rec.Segments, toName)
	}
	fmt.Fprintln(w, "vendors still on the old store stop within seconds; restart them with this environment's LEAF_POSTGRES_URL")
	return nil
}

// stillThere refuses -lost for a contract's store that can be reached: its
// max_ids can be carried over, and must be.
func (a *Admin) stillThere(ctx context.Context, recorded, from string) error {
	src, err := sourceOf(a.env, recorded, from)
	if err != nil {
		return nil // no way to reach it named: take -lost at its word
	}
	old, closeOld, err := OpenStore(ctx, src.PostgresURL, src.KVReplicas, a.js, false)
	if err != nil {
		return nil
	}
	defer closeOld()
	if info, err := old.Info(ctx); err == nil && src.StoreKind()+":"+info.ID == recorded {
		return fmt.Errorf("the contract's store %s is not lost: it answers, and its tags' max_ids must be carried over; move without -lost", recorded)
	}
	return nil
}

// sourceOf is env pointed at the contract's store, recorded, as -from
// names it.
func sourceOf(env Env, recorded, from string) (Env, error) {
	kind, _, _ := strings.Cut(recorded, ":")
	src := env
	switch {
	case from == "" && kind == cluster.KindKV, from == "kv":
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
func (a *Admin) carryOver(ctx context.Context, recorded, from string, to segment.AdminStore, toName string, w io.Writer) (int, error) {
	src, err := sourceOf(a.env, recorded, from)
	if err != nil {
		return 0, err
	}
	old, closeOld, err := OpenStore(ctx, src.PostgresURL, src.KVReplicas, a.js, false)
	if err != nil {
		return 0, fmt.Errorf("open the store to move from: %w", err)
	}
	defer closeOld()
	info, err := old.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the store to move from: %w", err)
	}
	if name := src.StoreKind() + ":" + info.ID; name != recorded {
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

// SetTerms changes the epoch (earlier only) or the worker-ID range in the
// cluster contract; 0 and "" keep them.
func (a *Admin) SetTerms(ctx context.Context, epoch int64, workerIDs, why string, w io.Writer) error {
	cs, rec, rev, err := a.Contract(ctx)
	if err != nil {
		return fmt.Errorf("%w: start a vendor with the settings you want; it records them", err)
	}
	next := rec
	layout, err := snowflake.ParseLayout(rec.Layout)
	if err != nil {
		return fmt.Errorf("the cluster's layout %s is not one this build vends in: %w", rec.Layout, err)
	}
	if epoch != 0 {
		switch {
		case epoch > rec.Epoch:
			return fmt.Errorf("epoch %d is later than the cluster's %d: every ID would get a smaller time and repeat IDs already handed out; only an earlier epoch is safe", epoch, rec.Epoch)
		case epoch < 0 || time.Now().UnixMilli()-epoch >= layout.MaxElapsed():
			return fmt.Errorf("epoch %d leaves no room in the %d time bits of layout %s", epoch, layout.TimeBits(), layout.Name())
		}
		next.Epoch = epoch
	}
	if workerIDs != "" {
		r, err := workerid.ParseRange(workerIDs)
		if err == nil {
			err = r.CheckIn(layout)
		}
		if err != nil {
			return usagef("-worker-ids: LEAF_WORKER_ID_RANGE %v", err)
		}
		next.WorkerIDs = workerIDs
	}
	next.By, next.At, next.Why = a.env.Self, time.Now().UTC(), why
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

// SetLeaseTTL changes the TTL of bucket leaf_workers. Safe at any time: a
// lease the server expires early loses its key, but its holder's last
// timestamp is recorded up to its deadline, which the next holder waits
// past.
func (a *Admin) SetLeaseTTL(ctx context.Context, ttl time.Duration, w io.Writer) error {
	s, err := a.js.Stream(ctx, "KV_"+a.js.Workers)
	if err != nil {
		return fmt.Errorf("bucket %s on %s: %w", a.js.Workers, a.where, err)
	}
	sc := s.CachedInfo().Config
	was := sc.MaxAge
	sc.MaxAge = ttl
	sc.Duplicates = min(2*time.Minute, ttl)
	// The contract keeps the longest lease any vendor may still hold: a
	// claim in buckets created again after a loss waits that long.
	cs, rec, rev, err := a.Contract(ctx)
	if err == nil && ttl > rec.LeaseTTL {
		next := rec
		next.LeaseTTL, next.By, next.At, next.Why = ttl, a.env.Self, time.Now().UTC(), "lease TTL "+ttl.String()
		if _, err := cs.Replace(ctx, next, rev); err != nil {
			return fmt.Errorf("record the lease TTL in the cluster contract (run the command again): %w", err)
		}
	}
	if _, err := a.js.UpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("change the TTL of bucket %s: %w", a.js.Workers, err)
	}
	fmt.Fprintf(w, "lease TTL of bucket %s: %v -> %v; vendors take it up at their next claim (a restart), and should set LEAF_WORKER_LEASE_TTL=%v too\n",
		a.js.Workers, was, ttl, ttl)
	return nil
}
