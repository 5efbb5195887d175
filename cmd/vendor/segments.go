package main

import (
	"context"
	"math"

	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/vending"
)

// Store kinds, as the cluster contract names them.
const (
	kindPostgres = cluster.KindPostgres
	kindKV       = cluster.KindKV
)

// segmentRateBurst is the most IDs of one tag a request may ask for under
// the rate limit: LEAF_SEGMENT_RATE_BURST, or a second of the limit; 0 with
// no limit.
func (c Config) segmentRateBurst() float64 {
	if c.SegmentRateLimit == 0 {
		return 0
	}
	if c.SegmentRateBurst > 0 {
		return c.SegmentRateBurst
	}
	return max(1, math.Ceil(c.SegmentRateLimit))
}

// storeKind is the kind of store cfg configures.
func (c Config) storeKind() string {
	if c.PostgresURL != "" {
		return kindPostgres
	}
	return kindKV
}

// openAllocator serves the tags of the vendor's store, floored on marks
// kept outside it: in KV bucket leaf_segment_marks for Postgres, in the
// vendors themselves for the KV store (which shares its JetStream with any
// bucket the marks could be kept in), and for an embedded store also in
// its record beside it (storedir.Record).
func (v *vendor) openAllocator(ctx context.Context, js kv.JS, replies *vending.Replies) error {
	cfg := v.cfg
	var marks segment.Marks
	if cfg.storeKind() == kindPostgres {
		var km *kv.Marks
		if err := v.retry(ctx, "open the segment marks", func() (err error) {
			km, err = kv.OpenMarks(ctx, js, cfg.KVReplicas)
			return err
		}); err != nil {
			return err
		}
		marks = km
	} else {
		nc := v.svcConn
		pm, err := cluster.OpenPeerMarks(cluster.PeerMarksConfig{Conn: nc, Notify: v.dataConn, JS: js, Prefix: cfg.SubjectPrefix, Self: instanceName(), Block: cfg.block(),
			Replies: replies, Fence: func() uint64 { return nc.Stats().Reconnects }, TrustAfter: 2 * cfg.WorkerLeaseTTL, Logger: v.log})
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
		RateLimit: cfg.SegmentRateLimit, RateBurst: cfg.SegmentRateBurst, Block: cfg.block()})
	return err
}
