package main

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/segment/pgstore"
	"github.com/leaf-nats/leaf/workerid"
)

var (
	_ segment.AdminStore = (*pgstore.Store)(nil)
	_ segment.AdminStore = (*kv.SegmentStore)(nil)
)

// Store kinds, as the cluster contract names them.
const (
	kindPostgres = cluster.KindPostgres
	kindKV       = cluster.KindKV
)

// storeKind is the kind of store cfg configures.
func (c Config) storeKind() string {
	if c.PostgresURL != "" {
		return kindPostgres
	}
	return kindKV
}

// openStore opens the configured segment store: Postgres when
// LEAF_POSTGRES_URL is set, else the JetStream KV bucket, which it creates
// when missing only if create: a KV store the cluster contract names is
// never created again empty. close releases it.
func openStore(ctx context.Context, cfg Config, js jetstream.JetStream, create bool) (st segment.AdminStore, close func(), err error) {
	if cfg.PostgresURL != "" {
		pg, err := pgstore.Open(cfg.PostgresURL)
		if err != nil {
			return nil, nil, err
		}
		return pg, func() { pg.Close() }, nil
	}
	var ks *kv.SegmentStore
	if create {
		ks, err = kv.NewSegmentStore(ctx, js, cfg.KVReplicas)
	} else {
		ks, err = kv.OpenSegmentStore(ctx, js)
	}
	if err != nil {
		return nil, nil, err
	}
	return ks, func() {}, nil
}

// openAllocator serves the tags of st.
func openAllocator(ctx context.Context, cfg Config, log *slog.Logger, st segment.AdminStore) (*segment.Allocator, error) {
	return segment.Open(ctx, segment.Options{Store: st, Logger: log, MaxStep: cfg.SegmentMaxStep,
		RateLimit: cfg.SegmentRateLimit, RateBurst: max(cfg.SegmentRateLimit, float64(cfg.MaxRangeBatch))})
}

// guardedSnowflake serves snowflake IDs past the contract guard's gate
// (vending.Snowflake): a vendor that cannot be sure its IDs are its own
// answers 503.
type guardedSnowflake struct {
	*workerid.Keeper
	guard *cluster.Guard
}

func (s guardedSnowflake) NextRanges(dst []ids.Range, n int) ([]ids.Range, error) {
	if err := s.guard.SnowflakeErr(); err != nil {
		return dst, err
	}
	return s.Keeper.NextRanges(dst, n)
}
