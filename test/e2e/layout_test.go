package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// TestJS53Layout: a vendor with LEAF_SNOWFLAKE_LAYOUT=js53 hands out IDs
// below 2^53, unique and ascending, which its decode endpoint reads in js53;
// a vendor of the default layout started on the same NATS is refused,
// told to set LEAF_SNOWFLAKE_LAYOUT=js53, and `vendor cluster show` names
// the layout.
func TestJS53Layout(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	nats := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": nats.url(), "LEAF_SNOWFLAKE_LAYOUT": "js53"}
	a := startVendor(t, "js53", env)
	worker := a.waitServing()
	if worker < 0 || worker > 15 {
		t.Fatalf("js53 vendor claimed worker ID %d, outside 0-15", worker)
	}
	nc := nats.conn(t)
	var all []int64
	for range 30 {
		msg, err := nc.Request("leaf.snowflake", []byte("1000"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := vending.DecodeText(nil, msg.Data)
		if err != nil {
			t.Fatalf("reply %.80q: %v", msg.Data, err)
		}
		all = append(all, ids...)
	}
	for i, id := range all {
		if id <= 0 || id >= 1<<53 {
			t.Fatalf("js53 ID %d is not in 1..2^53-1", id)
		}
		if i > 0 && id <= all[i-1] {
			t.Fatalf("ID %d after %d: not unique and ascending", id, all[i-1])
		}
	}
	for _, id := range []int64{all[0], all[len(all)/2], all[len(all)-1]} {
		msg, err := nc.Request("leaf.snowflake.decode", []byte(strconv.FormatInt(id, 10)), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var d vending.Decoded
		want, _ := snowflake.LayoutJS53.Decode(id, snowflake.DefaultEpoch)
		if err := json.Unmarshal(msg.Data, &d); err != nil || d.Layout != "js53" || d.WorkerID != worker ||
			d.TimestampMs != want.UnixMilli || d.Sequence != want.Sequence {
			t.Fatalf("decode %d: %q, %v; want %+v in layout js53", id, msg.Data, err, want)
		}
	}
	end := metricAt(t, a.httpAddr(), "leaf_snowflake_epoch_end_timestamp_seconds")
	if want := float64(snowflake.LayoutJS53.Ends(snowflake.DefaultEpoch).UnixMilli()) / 1000; end != want {
		t.Errorf("leaf_snowflake_epoch_end_timestamp_seconds %v, want %v", end, want)
	}

	b := newVendor(t, "default", map[string]string{"LEAF_NATS_URL": nats.url()})
	if !refused(t, b, `err.layout="the cluster's is 11+41+4+8, this vendor's 1+41+10+12; set LEAF_SNOWFLAKE_LAYOUT=js53`) {
		t.Error("a vendor of the default layout served in a js53 cluster")
	}
	if code, out := runVendor(t, env, "cluster", "show"); code != 0 || !strings.Contains(out, "11+41+4+8 (LEAF_SNOWFLAKE_LAYOUT=js53") {
		t.Errorf("vendor cluster show: exit %d:\n%s", code, out)
	}
	report(t, "js53 layout: %d IDs below 2^53 from worker ID %d, unique and ascending; a default-layout vendor refused", len(all), worker)
}
