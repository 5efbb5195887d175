package vending_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/vendtest"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// With a region, decode says which region made an ID, from its worker ID's
// block, and names it when it is the decoding vendor's own.
func TestDecodeNamesTheRegion(t *testing.T) {
	s := natstest.Server(t)
	g, err := snowflake.New(snowflake.Settings{WorkerID: 130})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := vending.Open(natstest.Conn(t, s), vending.Config{Snowflake: g, Region: vending.Region{Name: "west", ID: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	nc := natstest.Conn(t, s)
	now := time.Now().UnixMilli()
	for _, tc := range []struct {
		worker, region int
		name           string
	}{{130, 1, "west"}, {5, 0, ""}, {1023, 7, ""}} {
		id, _ := snowflake.Compose(snowflake.Parts{UnixMilli: now, WorkerID: tc.worker, Sequence: 3}, snowflake.DefaultEpoch)
		var d vending.Decoded
		if err := json.Unmarshal(vendtest.Request(t, nc, "leaf.snowflake.decode", strconv.FormatInt(id, 10)).Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.RegionID == nil || *d.RegionID != tc.region || d.Region != tc.name {
			t.Fatalf("worker ID %d: region %v %q, want %d %q", tc.worker, d.RegionID, d.Region, tc.region, tc.name)
		}
	}
}
