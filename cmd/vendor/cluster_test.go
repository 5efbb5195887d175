package main

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/pgtest"
	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment/kvstore"
	"github.com/leaf-nats/leaf/segment/pgstore"
	"github.com/leaf-nats/leaf/vending"
)

// command runs `vendor args...` with the environment set now and returns
// its exit code and output.
func command(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := run(context.Background(), args, &out, &out)
	return code, out.String()
}

// segmentIDs takes n IDs of tag.
func segmentIDs(t *testing.T, nc *nats.Conn, tag string, n int) []int64 {
	t.Helper()
	msg, err := nc.Request("leaf.segment."+tag, []byte(strconv.Itoa(n)), 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", tag, err)
	}
	ids, err := vending.DecodeText(nil, msg.Data)
	if err != nil || len(ids) != n {
		t.Fatalf("reply %q (%v): %v", msg.Data, msg.Header, err)
	}
	return ids
}

// waitExit waits for a vendor started by startVendor to stop by itself,
// logging want, and returns its exit code.
func waitExit(t *testing.T, stop func() int, logs *syncBuffer, want string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("vendor did not stop with %q:\n%s", want, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return stop()
}

// Two vendors with different segment stores on one NATS: the second is
// refused before it serves, naming both stores; the segments move from the
// KV store to Postgres and back with the admin command, every tag
// continuing above every ID handed out, and a vendor still on the old
// store stops.
func TestSegmentStoreMovesAndMismatches(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	t.Setenv("LEAF_POSTGRES_URL", "")

	stopKV, kvLogs := startVendor(t, nil)
	if code, out := command(t, "tags", "add", "order", "-step", "10"); code != 0 {
		t.Fatalf("tags add: %d %s", code, out)
	}
	handed := segmentIDs(t, nc, "order", 25)

	// A vendor on Postgres is refused while the contract names the KV store.
	t.Setenv("LEAF_POSTGRES_URL", dsn)
	t.Setenv("LEAF_HTTP_ADDR", "")
	code, out := command(t)
	if code != 1 || !strings.Contains(out, `err.segment_store="the cluster's is jetstream-kv:`) || !strings.Contains(out, "this vendor's postgres:") {
		t.Fatalf("a vendor with another segment store: exit %d:\n%s", code, out)
	}
	// So is a tag added there.
	if code, out := command(t, "tags", "add", "order", "-step", "10"); code != 1 || !strings.Contains(out, "is not the cluster's") {
		t.Fatalf("tags add in a store that is not the cluster's: exit %d:\n%s", code, out)
	}
	if code, out := command(t, "cluster", "show"); code != 0 || !strings.Contains(out, "segment store") || !strings.Contains(out, "this environment's settings differ") {
		t.Fatalf("cluster show: exit %d:\n%s", code, out)
	}

	// Move to Postgres: the KV vendor stops, a Postgres vendor continues above.
	if code, out := command(t, "cluster", "move-segments"); code != 0 || !strings.Contains(out, "moved 1 tags from jetstream-kv:") {
		t.Fatalf("move-segments to Postgres: exit %d:\n%s", code, out)
	}
	if code := waitExit(t, stopKV, kvLogs, "were moved to postgres:"); code != 1 {
		t.Fatalf("the vendor on the old store exited %d, want 1", code)
	}
	stopPG, pgLogs := startVendor(t, nil)
	moved := segmentIDs(t, nc, "order", 25)
	if moved[0] <= slices.Max(handed) {
		t.Fatalf("after the move the tag restarted at %d, below %d handed out before", moved[0], slices.Max(handed))
	}
	handed = append(handed, moved...)

	// And back: a KV vendor continues above everything.
	t.Setenv("LEAF_POSTGRES_URL", "")
	if code, out := command(t, "cluster", "move-segments", "-from", dsn); code != 0 || !strings.Contains(out, "moved 1 tags from postgres:") {
		t.Fatalf("move-segments back to KV: exit %d:\n%s", code, out)
	}
	if code := waitExit(t, stopPG, pgLogs, "were moved to jetstream-kv:"); code != 1 {
		t.Fatalf("the vendor on Postgres exited %d after the move back, want 1", code)
	}
	startVendor(t, nil)
	back := segmentIDs(t, nc, "order", 25)
	if back[0] <= slices.Max(handed) {
		t.Fatalf("after the move back the tag restarted at %d, below %d handed out before", back[0], slices.Max(handed))
	}
}

func TestClusterSet(t *testing.T) {
	s := natstest.Server(t)
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	stop, logs := startVendor(t, nil)

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cluster"}, 2, "Usage:"},
		{[]string{"cluster", "set"}, 2, "give one"},
		{[]string{"cluster", "set", "-epoch", "1600000000000"}, 1, "only an earlier epoch is safe"},
		{[]string{"cluster", "set", "-worker-ids", "7-3"}, 2, "LEAF_WORKER_ID_RANGE"},
		{[]string{"cluster", "show"}, 0, "worker IDs 0-1023"},
		{[]string{"cluster", "set-lease-ttl", "0.5s"}, 2, "1s or more"},
		{[]string{"cluster", "set-lease-ttl", "10s"}, 0, "1s -> 10s"},
		{[]string{"cluster", "set", "-worker-ids", "0-511", "-why", "the other region takes 512-1023"}, 0, "worker IDs: 0-1023 -> 0-511"},
	} {
		if code, out := command(t, tc.args...); code != tc.code || !strings.Contains(squash(out), tc.want) {
			t.Fatalf("vendor %v: exit %d:\n%s\nwant exit %d and %q", tc.args, code, out, tc.code, tc.want)
		}
	}
	// The running vendor, still on 0-1023, stops; one on 0-511 serves.
	if code := waitExit(t, stop, logs, `err.worker_ids="the cluster's is 0-511, this vendor's 0-1023`); code != 1 {
		t.Fatalf("exit %d", code)
	}
	t.Setenv("LEAF_HTTP_ADDR", "")
	if code, out := command(t); code != 1 || !strings.Contains(out, "set LEAF_WORKER_ID_RANGE=0-511") {
		t.Fatalf("a vendor with the old range: exit %d:\n%s", code, out)
	}
	startVendor(t, map[string]string{"LEAF_WORKER_ID_RANGE": "0-511"})
	if code, out := command(t, "cluster", "show"); code != 0 || !strings.Contains(out, "the other region takes 512-1023") || !strings.Contains(squash(out), "lease TTL 10s") {
		t.Fatalf("cluster show after the change: exit %d:\n%s", code, out)
	}
}

// squash collapses runs of spaces, as a table pads them.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// A move interrupted after the old store was sealed, before the contract
// names the new one: the vendor on the old store refuses segment requests
// with a 503 that says to run the move again, keeps serving snowflake IDs,
// and `cluster show` says the same; the move run again finishes.
func TestInterruptedMove(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	t.Setenv("LEAF_POSTGRES_URL", "")
	stop, logs := startVendor(t, nil)
	if code, out := command(t, "tags", "add", "order", "-step", "10"); code != 0 {
		t.Fatalf("tags add: %d %s", code, out)
	}
	handed := segmentIDs(t, nc, "order", 25)

	// The move's first half: seal the KV store toward the Postgres one.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := kvstore.Open(ctx, kv.Plain(js))
	if err != nil {
		t.Fatal(err)
	}
	pg, err := pgstore.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	pgInfo, err := pg.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Seal(ctx, storeName(kindPostgres, pgInfo)); err != nil {
		t.Fatal(err)
	}
	// IDs already loaded are served (the move carries their max_id over);
	// then the sealed store refuses more, and the guard says what to do.
	eventually(t, 15*time.Second, "segment requests refused, saying to run the move again", func() bool {
		msg, err := nc.Request("leaf.segment.order", []byte("5"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ids, err := vending.DecodeText(nil, msg.Data); err == nil {
			handed = append(handed, ids...)
			return false
		}
		return msg.Header.Get(micro.ErrorCodeHeader) == "503" &&
			strings.Contains(msg.Header.Get(micro.ErrorHeader), "was interrupted or is running; run it again")
	})
	if msg, err := nc.Request("leaf.snowflake", nil, 5*time.Second); err != nil || msg.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("snowflake during the interrupted move: %v %v", msg, err)
	}
	if code, out := command(t, "cluster", "show"); code != 0 || !strings.Contains(out, "was interrupted (or is running); run it again") {
		t.Fatalf("cluster show: exit %d:\n%s", code, out)
	}
	t.Setenv("LEAF_POSTGRES_URL", dsn)
	if code, out := command(t, "cluster", "move-segments"); code != 0 || !strings.Contains(out, "moved 1 tags") {
		t.Fatalf("move-segments again: exit %d:\n%s", code, out)
	}
	if code := waitExit(t, stop, logs, "were moved to postgres:"); code != 1 {
		t.Fatalf("the vendor on the old store exited %d, want 1", code)
	}
	startVendor(t, nil)
	if moved := segmentIDs(t, nc, "order", 25); moved[0] <= slices.Max(handed) {
		t.Fatalf("after the move the tag restarted at %d, below %d handed out before", moved[0], slices.Max(handed))
	}
}

// -lost is refused for a store that answers: its max_ids must be carried.
func TestMoveLostRefusesAStoreThatAnswers(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := natstest.Server(t)
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	t.Setenv("LEAF_POSTGRES_URL", "")
	startVendor(t, nil)
	t.Setenv("LEAF_POSTGRES_URL", dsn)
	if code, out := command(t, "cluster", "move-segments", "-lost"); code != 1 || !strings.Contains(out, "is not lost: it answers") {
		t.Fatalf("move-segments -lost from a live KV store: exit %d:\n%s", code, out)
	}
}

// eventually is testtool.Eventually, under the name these tests use.
var eventually = testtool.Eventually
