package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/segment/pgstore"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/workerid"
)

// tagStore is a segment store the vendor can allocate from and manage: the
// tags commands, and the cluster commands that move segments between
// stores.
type tagStore interface {
	segment.Store
	// Create adds a row; segment.ErrTagExists when the tag has one.
	Create(ctx context.Context, r segment.Row) error
	// List returns every row, ordered by tag.
	List(ctx context.Context) ([]segment.Row, error)
	// SetStep changes a row's step; segment.ErrUnknownTag when absent.
	SetStep(ctx context.Context, tag string, step int64) error
	// SetStrict makes a tag strict or normal; segment.ErrUnknownTag when
	// absent.
	SetStrict(ctx context.Context, tag string, strict bool) error
	// Delete removes a row; segment.ErrUnknownTag when absent.
	Delete(ctx context.Context, tag string) error
	// Info returns the store's identity (recording one the first time)
	// and whether its segments moved to another store.
	Info(ctx context.Context) (segment.StoreInfo, error)
	// Seal marks the segments moved to the store named to and returns
	// every row, live and retired, as of then; no allocation succeeds
	// after it.
	Seal(ctx context.Context, to string) ([]segment.Row, error)
	// Unseal makes a sealed store serve again.
	Unseal(ctx context.Context) error
	// Raise makes every ID handed out for the row's tag from now on at
	// least its MaxID, creating the row if needed; it never lowers one.
	Raise(ctx context.Context, r segment.Row) error
}

var (
	_ tagStore = (*pgstore.Store)(nil)
	_ tagStore = (*kv.SegmentStore)(nil)
)

// Store kinds, as the cluster contract names them.
const (
	kindPostgres = "postgres"
	kindKV       = "jetstream-kv"
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
func openStore(ctx context.Context, cfg Config, js jetstream.JetStream, create bool) (st tagStore, close func(), err error) {
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

// segments is the segment side of a running vendor. Requests pass its gate
// once the contract guard has matched the store against the contract; a
// strict tag's go to its leader.
type segments struct {
	alloc  *segment.Allocator
	store  tagStore
	kind   string
	close  func()
	gate   func() error // nil: pass; else why not
	strict *strictTags  // nil until the service's connection is up
}

func openSegments(ctx context.Context, cfg Config, st tagStore, closeStore func(), log *slog.Logger) (*segments, error) {
	alloc, err := segment.Open(ctx, segment.Options{Store: st, Logger: log, MaxStep: cfg.SegmentMaxStep})
	if err != nil {
		closeStore()
		return nil, err
	}
	return &segments{alloc: alloc, store: st, kind: cfg.storeKind(), close: closeStore, gate: func() error { return nil }}, nil
}

var errNoStrict = fmt.Errorf("%w: strict tags are not served yet", segment.ErrUnavailable)

// TryTakeRanges serves from the buffers, past the gate (vending.Segments).
// A strict tag is served from memory only by its leader.
func (s *segments) TryTakeRanges(tag string, dst []segment.Range, n int64) ([]segment.Range, bool, error) {
	if err := s.gate(); err != nil {
		return dst, false, err
	}
	if s.alloc.IsStrict(tag) {
		if s.strict == nil {
			return dst, false, errNoStrict
		}
		rs, ok, err := s.strict.TryTake(tag, dst, n)
		if !errors.Is(err, segment.ErrNotStrict) { // else normal again: served below
			return rs, ok, err
		}
	}
	rs, ok, err := s.alloc.TryTakeRanges(tag, dst, n)
	if errors.Is(err, segment.ErrStrict) { // strict since the check: TakeRanges serves it
		return dst, false, nil
	}
	return rs, ok, err
}

// TakeRanges serves waiting for the store, past the gate (vending.Segments);
// a strict tag's requests wait for its leader, or take the lead.
func (s *segments) TakeRanges(ctx context.Context, tag string, dst []segment.Range, n int64) ([]segment.Range, error) {
	if err := s.gate(); err != nil {
		return dst, err
	}
	for range 2 { // a tag whose mode changes under the call is asked for again
		if s.alloc.IsStrict(tag) {
			if s.strict == nil {
				return dst, errNoStrict
			}
			rs, err := s.strict.Take(ctx, tag, dst, n)
			if !errors.Is(err, segment.ErrNotStrict) {
				return rs, err
			}
		}
		rs, err := s.alloc.TakeRanges(ctx, tag, dst, n)
		if !errors.Is(err, segment.ErrStrict) {
			return rs, err
		}
	}
	return dst, fmt.Errorf("%w: tag %q: its mode is being changed; ask again", segment.ErrUnavailable, tag)
}

// IsStrict tells the service which replies to mark strict
// (vending.StrictSegments).
func (s *segments) IsStrict(tag string) bool { return s.alloc.IsStrict(tag) }

// Close stops leading strict tags and the allocator, then closes the
// store.
func (s *segments) Close() {
	if s.strict != nil {
		s.strict.Close()
	}
	s.alloc.Close()
	s.close()
}

// guardedSnowflake serves snowflake IDs past the contract guard's gate
// (vending.Snowflake): a vendor that cannot be sure its IDs are its own
// answers 503.
type guardedSnowflake struct {
	*workerid.Keeper
	guard *contractGuard
}

func (s guardedSnowflake) NextRanges(dst []snowflake.Range, n int) ([]snowflake.Range, error) {
	if err := s.guard.snowflakeErr(); err != nil {
		return dst, err
	}
	return s.Keeper.NextRanges(dst, n)
}
