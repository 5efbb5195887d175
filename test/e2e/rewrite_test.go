package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/pgtest"
	"github.com/leaf-nats/leaf/kv"
)

// A store rewritten live (issue 30, gap 1): while three vendors serve tag
// e2e, someone with a vendor's or a DBA's rights sets its max_id back again
// and again (nats kv put leaf_segments e2e, UPDATE leaf_alloc SET max_id),
// each time below IDs already handed out. Nothing on the vendors'
// connections says so: every allocation must check the row it read against
// what every vendor handed out, raise it above that, log it and count it in
// leaf_segment_store_rewinds_total. No ID may repeat.

// rewriteLoad: four requesters of 50-ID batches, as in the issue.
var rewriteLoad = loadSpec{subject: "leaf.segment.e2e", batch: 50, clients: 4, timeout: time.Second, pace: 20 * time.Millisecond}

// rewrites is how many times the row is set back, every rewriteEvery, by
// rewriteBack IDs: more than the vendors hold in their buffers (two
// segments of up to 10,000 each), so that most rewrites go below IDs the
// clients received.
const (
	rewrites     = 30
	rewriteEvery = 100 * time.Millisecond
	rewriteBack  = 100_000
)

// TestRewriteKVLive: the KV segment store's row rewritten with nats kv put.
func TestRewriteKVLive(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	ns := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_SEGMENT_MAX_STEP": rewindMaxStep}
	js, err := jetstream.New(ns.conn(t))
	if err != nil {
		t.Fatal(err)
	}
	rewriteLive(t, "KV store rewritten live", env, ns.conn(t), func(back int64) (int64, int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b, err := js.KeyValue(ctx, kv.SegmentBucket)
		if err != nil {
			t.Fatal(err)
		}
		e, err := b.Get(ctx, "e2e")
		if err != nil {
			t.Fatal(err)
		}
		var row map[string]any
		if err := json.Unmarshal(e.Value(), &row); err != nil {
			t.Fatal(err)
		}
		was := int64(row["max_id"].(float64))
		row["max_id"] = max(1, was-back)
		v, _ := json.Marshal(row)
		if _, err := b.Put(ctx, "e2e", v); err != nil { // as nats kv put does: no revision
			t.Fatal(err)
		}
		return was, max(1, was-back)
	})
}

// TestRewritePostgresLive: leaf_alloc's row rewritten by a DBA's UPDATE.
func TestRewritePostgresLive(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	pg := pgtest.StartServer(t)
	ns := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_POSTGRES_URL": pg.DSN(), "LEAF_SEGMENT_MAX_STEP": rewindMaxStep}
	db, err := sql.Open("postgres", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rewriteLive(t, "Postgres rewritten live", env, ns.conn(t), func(back int64) (int64, int64) {
		var was, now int64
		err := db.QueryRow(`UPDATE leaf_alloc a SET max_id = greatest(1, a.max_id - $1) FROM leaf_alloc b
			WHERE a.biz_tag = 'e2e' AND b.biz_tag = a.biz_tag RETURNING b.max_id, a.max_id`, back).Scan(&was, &now)
		if err != nil {
			t.Fatal(err)
		}
		return was, now
	})
}

// rewriteLive runs three vendors with env under rewriteLoad and sets the
// row of e2e back with rewrite (by back IDs; it returns max_id before and
// after) rewrites times, each time below IDs handed out.
func rewriteLive(t *testing.T, name string, env map[string]string, nc *nats.Conn, rewrite func(back int64) (was, now int64)) {
	vendorCommand(t, env, "tags", "add", "e2e", "-step", "1000")
	vs := startVendors(t, "v", 3, env)
	seg := newTally(name)
	d := startLoad(t, nc, seg, rewriteLoad)
	seg.waitIDs(t, 20_000, 30*time.Second)
	high := highestOf(seg)
	below := 0 // rewrites that set the row below an ID handed out
	began := time.Now()
	for range rewrites {
		<-time.After(rewriteEvery) // the rewrites' pace, not a synchronisation
		if was, now := rewrite(rewriteBack); now < high() {
			below++
			t.Logf("max_id %d set back to %d; IDs up to %d handed out", was, now, high())
		}
	}
	took := time.Since(began)
	seg.waitOK(t, 200, 30*time.Second, "after the rewrites")
	d.stop()
	seg.check(t)
	var found float64
	for _, v := range vs {
		found += metricAt(t, v.httpAddr(), "leaf_segment_store_rewinds_total")
	}
	logged := len(rewindsOf(vs))
	report(t, "%s: %d rewrites in %v, %d of them below IDs handed out; rewinds logged %d, counted %v", name, rewrites, took.Round(10*time.Millisecond), below, logged, found)
	if below == 0 {
		t.Fatal("no rewrite set the row below the IDs handed out: the scenario could not fail")
	}
	if logged == 0 || found < float64(logged) {
		t.Errorf("rewinds logged %d, counted %v in leaf_segment_store_rewinds_total; want some, each counted", logged, found)
	}
	for _, r := range rewindsOf(vs) {
		if !strings.Contains(r.from, "marks") && !strings.Contains(r.from, "this vendor") {
			t.Errorf("vendor %s found a rewind known from %q", r.v.name, r.from)
		}
	}
}
