package vending_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/vendtest"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// A js53 vendor says so in its metadata, and its decode endpoint (and
// Client.Decode) reads IDs in js53, saying which layout it read them in.
func TestJS53DecodeAndMetadata(t *testing.T) {
	s := natstest.Server(t)
	g, err := snowflake.New(snowflake.Settings{Layout: snowflake.LayoutJS53, WorkerID: 9})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := vending.Open(natstest.Conn(t, s), vending.Config{Snowflake: g, Layout: snowflake.LayoutJS53})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	nc := natstest.Conn(t, s)

	var info micro.Info
	if err := json.Unmarshal(vendtest.Request(t, nc, "$SRV.INFO.leaf", "").Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Metadata[vending.MetaLayout] != "js53" || info.Metadata[vending.MetaLayoutBits] != "11+41+4+8" {
		t.Fatalf("metadata %v: want %s=js53", info.Metadata, vending.MetaLayout)
	}

	c, err := vending.NewClient(nc, vending.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ids, err := c.NextN(context.Background(), 300)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if id >= 1<<53 {
			t.Fatalf("js53 vendor handed out %d, not below 2^53", id)
		}
	}
	d, err := c.Decode(context.Background(), ids[299])
	want, _ := snowflake.LayoutJS53.Decode(ids[299], snowflake.DefaultEpoch)
	if err != nil || d.Layout != "js53" || d.WorkerID != 9 || d.TimestampMs != want.UnixMilli || d.Sequence != want.Sequence {
		t.Fatalf("Decode(%d) = %+v, %v; want %+v in js53", ids[299], d, err, want)
	}
	// An ID of the default layout has bits above the 53: not one of this
	// vendor's.
	big := int64(1862213154793730049)
	if _, err := c.Decode(context.Background(), big); !errors.Is(err, vending.ErrBadRequest) {
		t.Fatalf("Decode(%d) on a js53 vendor: %v, want a 400", big, err)
	}
	msg := vendtest.Request(t, nc, "leaf.snowflake.decode", strconv.FormatInt(big, 10))
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "400" {
		t.Fatalf("decode %d: code %q, want 400", big, code)
	}
}
