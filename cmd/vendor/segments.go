package main

import (
	"context"

	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/internal/config"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/vending"
)

// Store kinds, as the cluster contract names them.
const (
	kindPostgres = cluster.KindPostgres
	kindKV       = cluster.KindKV
)

// openAllocator serves the tags of the vendor's store, floored on marks
// kept outside it: in KV bucket leaf_segment_marks for Postgres, in the
// vendors themselves for the KV store (which shares its JetStream with any
// bucket the marks could be kept in), and for an embedded store also in
// its record beside it (storedir.Record).
func (v *vendor) openAllocator(ctx context.Context, js kv.JS, replies *vending.Replies) error {
	cfg := v.cfg
	var marks segment.Marks
	if cfg.StoreKind() == kindPostgres {
		var km *kv.Marks
		if err := v.retry(ctx, "open the segment marks", func() (err error) {
			km, err = kv.OpenMarks(ctx, js, cfg.KVReplicas)
			return err
		}); err != nil {
			return err
		}
		marks = km
	} else {
		// The fence moves when either connection reconnects: the store is
		// read on the data connection, which may come back to a restored
		// server before the service connection does.
		nc := v.svcConn
		fence := func() uint64 { return nc.Stats().Reconnects + v.dataConn.Stats().Reconnects }
		pm, err := cluster.OpenPeerMarks(cluster.PeerMarksConfig{Conn: nc, Notify: v.dataConn, JS: js, Prefix: cfg.SubjectPrefix, Self: config.InstanceName(), Block: cfg.Block(),
			Replies: replies, Fence: fence, TrustAfter: 2 * cfg.WorkerLeaseTTL, Logger: v.log})
		if err != nil {
			return err
		}
		v.peerMarks, marks = pm, pm
		if v.record != nil {
			// Beside the embedded store, outside it: a store deleted or
			// put back older is raised above what this directory served.
			marks = segment.AllMarks{pm, v.record}
		}
	}
	var err error
	v.alloc, err = segment.Open(ctx, segment.Options{Store: v.store, Logger: v.log, MaxStep: cfg.SegmentMaxStep, Marks: marks, GiveBack: cfg.SegmentGiveBack,
		RateLimit: cfg.SegmentRateLimit, RateBurst: cfg.SegmentRateBurst, Block: cfg.Block()})
	return err
}
