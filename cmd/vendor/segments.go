package main

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/segment/pgstore"
)

// tagStore is a segment store the vendor can both allocate from and manage
// (the tags commands).
type tagStore interface {
	segment.Store
	// Create adds a row; segment.ErrTagExists when the tag has one.
	Create(ctx context.Context, r segment.Row) error
	// List returns every row, ordered by tag.
	List(ctx context.Context) ([]segment.Row, error)
	// SetStep changes a row's step; segment.ErrUnknownTag when absent.
	SetStep(ctx context.Context, tag string, step int64) error
	// Delete removes a row; segment.ErrUnknownTag when absent.
	Delete(ctx context.Context, tag string) error
}

var (
	_ tagStore = (*pgstore.Store)(nil)
	_ tagStore = (*kv.SegmentStore)(nil)
)

// openStore opens the configured segment store: Postgres when
// LEAF_POSTGRES_URL is set, else the JetStream KV bucket. close releases it.
func openStore(ctx context.Context, cfg Config, js jetstream.JetStream) (st tagStore, kind string, close func(), err error) {
	if cfg.PostgresURL != "" {
		pg, err := pgstore.Open(cfg.PostgresURL)
		if err != nil {
			return nil, "", nil, err
		}
		return pg, "postgres", func() { pg.Close() }, nil
	}
	ks, err := kv.NewSegmentStore(ctx, js, cfg.KVReplicas)
	if err != nil {
		return nil, "", nil, err
	}
	return ks, "jetstream-kv", func() {}, nil
}

// segments is the segment side of a running vendor.
type segments struct {
	alloc *segment.Allocator
	store tagStore
	kind  string
	close func()
}

func openSegments(ctx context.Context, cfg Config, js jetstream.JetStream, log *slog.Logger) (*segments, error) {
	st, kind, closeStore, err := openStore(ctx, cfg, js)
	if err != nil {
		return nil, err
	}
	alloc, err := segment.Open(ctx, segment.Options{Store: st, Logger: log, MaxStep: cfg.SegmentMaxStep})
	if err != nil {
		closeStore()
		return nil, err
	}
	return &segments{alloc: alloc, store: st, kind: kind, close: closeStore}, nil
}

// Close stops the allocator, then closes the store.
func (s *segments) Close() {
	s.alloc.Close()
	s.close()
}
