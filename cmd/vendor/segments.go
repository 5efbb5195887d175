package main

import (
	"context"
	"log/slog"

	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/segment"
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

// openAllocator serves the tags of st.
func openAllocator(ctx context.Context, cfg Config, log *slog.Logger, st segment.AdminStore) (*segment.Allocator, error) {
	return segment.Open(ctx, segment.Options{Store: st, Logger: log, MaxStep: cfg.SegmentMaxStep,
		RateLimit: cfg.SegmentRateLimit, RateBurst: max(cfg.SegmentRateLimit, float64(cfg.MaxRangeBatch))})
}
