package e2e

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/pgtest"
)

// TestCleanRestartSkipsNoID is Leaf's issues 15 and 78: take 5 IDs of a
// tag with step 2,000, stop the vendor with SIGTERM, start it again: the
// next ID is the 6th, on both stores (it was the 2,001st; measured with
// LEAF_SEGMENT_GIVE_BACK=false next to it).
func TestCleanRestartSkipsNoID(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	for _, store := range []string{"kv", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel() // each on servers of its own
			ns := startNATS(t)
			env := map[string]string{"LEAF_NATS_URL": ns.url()}
			if store == "postgres" {
				env["LEAF_POSTGRES_URL"] = pgtest.StartServer(t).DSN()
			}
			nc := ns.conn(t)
			next := map[string]int64{}
			for i, giveBack := range []string{"false", "true"} {
				tag := "order" + strconv.Itoa(i)
				vendorCommand(t, env, "tags", "add", tag, "-step", "2000")
				env["LEAF_SEGMENT_GIVE_BACK"] = giveBack
				v := startVendor(t, "g"+giveBack, env)
				tl := newTally("clean restart, " + store)
				if ids, code := tl.request(nc, "leaf.segment."+tag, 5, 5*time.Second); code != "" || ids[4] != 5 {
					t.Fatalf("the first 5 IDs: %v %s", ids, code)
				}
				if code := v.stop(30 * time.Second); code != 0 {
					t.Fatalf("vendor exited %d on SIGTERM", code)
				}
				v.start()
				v.waitServing()
				ids, code := tl.request(nc, "leaf.segment."+tag, 1, 5*time.Second)
				if code != "" {
					t.Fatalf("after the restart: %s", code)
				}
				next[giveBack] = ids[0]
				tl.check(t)
				v.stop(30 * time.Second)
			}
			report(t, "clean restart, %s store, step 2000, 5 IDs taken: next ID %d with LEAF_SEGMENT_GIVE_BACK=false (%d skipped), %d with the default (%d skipped)",
				store, next["false"], next["false"]-6, next["true"], next["true"]-6)
			if next["true"] != 6 {
				t.Errorf("after a clean restart the next ID is %d, want 6", next["true"])
			}
		})
	}
}

// TestRollingRestartUnderLoad restarts three vendors one after the other
// under load, cleanly, and counts the IDs skipped (the gaps between the
// lowest and highest ID handed out) and repeated, without giving back and
// with it. No ID may repeat. Only the vendor holding the newest segment can
// give back, so with three vendors under load most of what the others
// held stays skipped: the counts are reported, not compared.
func TestRollingRestartUnderLoad(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	ns := startNATS(t)
	nc := ns.conn(t)
	gaps := map[string]int64{}
	for i, giveBack := range []string{"false", "true"} {
		tag := "roll" + strconv.Itoa(i)
		env := map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_SEGMENT_GIVE_BACK": giveBack}
		vendorCommand(t, env, "tags", "add", tag, "-step", "2000")
		vs := startVendors(t, "r"+strconv.Itoa(i)+"-", 3, env)
		tl := newTally("rolling restart, give back " + giveBack)
		d := startLoad(t, nc, tl, loadSpec{subject: "leaf.segment." + tag, batch: 10, clients: 2, timeout: 5 * time.Second, pace: 20 * time.Millisecond})
		tl.waitIDs(t, 5000, 30*time.Second)
		for _, v := range vs {
			if code := v.stop(30 * time.Second); code != 0 {
				t.Fatalf("vendor %s exited %d on SIGTERM", v.name, code)
			}
			v.start()
			v.waitServing()
			tl.waitOK(t, 100, 30*time.Second, "after restarting "+v.name)
		}
		d.stop()
		for _, v := range vs {
			v.stop(30 * time.Second)
		}
		got := tl.snapshotIDs()
		slices.Sort(got)
		unique := slices.Compact(slices.Clone(got))
		gaps[giveBack] = got[len(got)-1] - got[0] + 1 - int64(len(unique))
		report(t, "rolling restart of 3 vendors, LEAF_SEGMENT_GIVE_BACK=%s: %d IDs from %d to %d, %d skipped (%d a restart), %d repeated",
			giveBack, len(got), got[0], got[len(got)-1], gaps[giveBack], gaps[giveBack]/3, len(got)-len(unique))
		tl.check(t)
	}
}
