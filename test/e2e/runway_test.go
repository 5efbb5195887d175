package e2e

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/pgtest"
)

// TestTagRunsOut starts a tag 2,500 IDs below the largest int64, on each
// store, and asks two vendors for it until it is used up: every ID up to
// the limit is handed out once, then every request is answered 410 saying
// the tag is used up (not 503, not "store down"); the store stays up, the
// runway metric counts down to 0, and a start that leaves no room is
// refused by tags add.
func TestTagRunsOut(t *testing.T) {
	for _, store := range []string{"postgres", "kv"} {
		t.Run(store, func(t *testing.T) {
			ns := startNATS(t)
			env := map[string]string{"LEAF_NATS_URL": ns.url()}
			if store == "postgres" {
				env["LEAF_POSTGRES_URL"] = pgtest.StartServer(t).DSN()
			}
			const left = 2500
			start := int64(math.MaxInt64 - left)
			if code, out := runVendor(t, env, "tags", "add", "top", "-step", "1000", "-start", strconv.FormatInt(math.MaxInt64-999, 10)); code == 0 || !strings.Contains(out, "leaves no room") {
				t.Errorf("tags add with no room for a segment: exit %d\n%s", code, out)
			}
			vendorCommand(t, env, "tags", "add", "top", "-step", "1000", "-start", strconv.FormatInt(start, 10))
			vendors := startVendors(t, "r", 2, env)
			tl := newTally("tag runs out, " + store)
			nc := ns.conn(t)
			// Each vendor holds segments of its own: one may answer 410 while
			// the other still has IDs. Ask until 40 answers in a row are
			// 410s; what is left below the limit, fewer than 7, goes to
			// requests of one.
			for _, n := range []int{7, 1} {
				for in410 := 0; in410 < 40; {
					if _, code := tl.request(nc, "leaf.segment.top", n, 5*time.Second); code == "410" {
						in410++
					} else {
						in410 = 0
					}
				}
			}
			got := tl.snapshotIDs()
			runway := math.MaxFloat64
			for _, v := range vendors {
				runway = min(runway, metric(httpGet(t, "http://"+v.httpAddr()+"/metrics"), "leaf_segment_runway_ids"))
			}
			storeUp := vendorMetric(vendors, "leaf_store_up")
			report(t, "tag runs out, %s: %d IDs from %d up to %d (want %d), then %d requests answered 410: %q; least runway metric %.0f, leaf_store_up %.0f of 2, errors %s",
				store, len(got), start, slices.Max(got), left, tl.errCount("410"), tl.sample("410"), runway, storeUp, formatErrs(tl.errs))
			if int64(len(got)) != left || slices.Max(got) != math.MaxInt64-1 {
				t.Errorf("%d IDs handed out, the highest %d; want every one of the %d below the largest int64", len(got), slices.Max(got), left)
			}
			if tl.errCount("410") == 0 || !strings.Contains(tl.sample("410"), "use another tag") || len(tl.errs) != 1 {
				t.Errorf("once used up: errors %s, want only 410s saying to use another tag", formatErrs(tl.errs))
			}
			if storeUp != 2 || runway != 0 {
				t.Errorf("leaf_store_up %.0f of 2 vendors, runway %.0f; want the store up and no runway left", storeUp, runway)
			}
			tl.check(t)
		})
	}
}

// TestBigFirstRequest asks a tag no vendor has loaded for 100,000,000 IDs
// at once, in ranges: one allocation of exactly that many (and one
// preload), answered at once.
func TestBigFirstRequest(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	pg := pgtest.StartServer(t)
	ns := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_POSTGRES_URL": pg.DSN(), "LEAF_MAX_RANGE_BATCH": "1000000000"}
	vendorCommand(t, env, "tags", "add", "big", "-step", "1000")
	v := startVendor(t, "b", env)
	before := pgMaxID(t, pg.DSN(), "big")
	tl := newTally("big first request")
	const n = 100_000_000
	code := tl.requestRanges(ns.conn(t), "leaf.segment.big", n, 10*time.Second)
	after := pgMaxID(t, pg.DSN(), "big")
	loads := metric(httpGet(t, "http://"+v.httpAddr()+"/metrics"), `leaf_segment_loads_total{tag="big"}`)
	report(t, "big first request: %d IDs asked: code %q, max_id %d -> %d (+%d), segment loads %.0f", n, code, before, after, after-before, loads)
	if code != "" || after-before < n || after-before > n+2000 {
		t.Errorf("a first request of %d IDs: code %q, max_id moved by %d; want it answered by one allocation of %d (and at most a preload)", n, code, after-before, n)
	}
	tl.check(t)
}

// TestModeSwitchUnderLoad turns a tag strict and normal again, five times,
// under load on two vendors: no request is answered 500, and no ID repeats.
func TestModeSwitchUnderLoad(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	ns := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_STRICT_LEASE_TTL": "2s"}
	vendorCommand(t, env, "tags", "add", "sw", "-step", "1000")
	startVendors(t, "s", 2, env)
	tl := newTally("mode switch under load")
	d := startLoad(t, ns.conn(t), tl, loadSpec{subject: "leaf.segment.sw", batch: 10, clients: 4, timeout: 5 * time.Second, pace: 10 * time.Millisecond})
	tl.waitIDs(t, 1000, 30*time.Second)
	for i := range 10 {
		mode := []string{"strict", "normal"}[i%2]
		vendorCommand(t, env, "tags", "set-mode", "sw", mode)
		tl.waitOK(t, 20, 30*time.Second, "after set-mode "+mode)
	}
	d.stop()
	report(t, "mode switch under load: 10 switches; %d IDs, errors %s", len(tl.snapshotIDs()), formatErrs(tl.errs))
	if n := tl.errCount("500"); n > 0 {
		t.Errorf("%d requests answered 500 during mode switches: %s", n, tl.sample("500"))
	}
	tl.check(t)
}
