package kv_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/segment/kvstore"
)

// BenchmarkSegmentLoad is what a vendor writes to JetStream per segment it
// loads: a KV store's allocation (a compare-and-set of the tag's row), and
// for a Postgres store the mark recorded before the segment is served. The
// embedded server syncs every write before acknowledging it ("sync"); "lazy"
// is nats-server's default (a sync every 2 minutes), the cost it saves.
func BenchmarkSegmentLoad(b *testing.B) {
	for _, mode := range []struct {
		name string
		sync bool
	}{{"sync", true}, {"lazy", false}} {
		s := natstest.ServerWith(b, natsserver.Config{
			StoreDir:  b.TempDir(),
			Configure: func(o *server.Options) { o.SyncAlways = mode.sync },
		})
		js := natstest.JetStream(b, s)
		ctx := context.Background()
		store, err := kvstore.New(ctx, kv.Plain(js), 1)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Create(ctx, segment.Row{Tag: "bench", MaxID: 1, Step: 1000}); err != nil {
			b.Fatal(err)
		}
		marks, err := kv.OpenMarks(ctx, kv.Plain(js), 1)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("alloc-"+mode.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := store.Alloc(ctx, "bench", 1000, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("mark-"+mode.name, func(b *testing.B) {
			b.ReportAllocs()
			end := int64(0)
			for b.Loop() {
				end += 1000
				if err := marks.Record(ctx, "bench", end); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
