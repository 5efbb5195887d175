package main

import (
	"context"
	"errors"
	"fmt"
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

// segments is the segment side of a running vendor. Requests pass its gate
// once the contract guard has matched the store against the contract; a
// strict tag's go to its leader.
type segments struct {
	alloc  *segment.Allocator
	store  segment.AdminStore
	kind   string
	close  func()
	gate   func() error // nil: pass; else why not
	strict *strictTags  // nil until the service's connection is up
}

// openSegments serves the tags of st past gate; closeStore closes st.
func openSegments(ctx context.Context, cfg Config, log *slog.Logger, st segment.AdminStore, closeStore func(), gate func() error) (*segments, error) {
	alloc, err := segment.Open(ctx, segment.Options{Store: st, Logger: log, MaxStep: cfg.SegmentMaxStep,
		RateLimit: cfg.SegmentRateLimit, RateBurst: max(cfg.SegmentRateLimit, float64(cfg.MaxRangeBatch))})
	if err != nil {
		closeStore()
		return nil, err
	}
	return &segments{alloc: alloc, store: st, kind: cfg.storeKind(), close: closeStore, gate: gate}, nil
}

var errNoStrict = fmt.Errorf("%w: strict tags are not served yet", segment.ErrUnavailable)

// TryTakeRanges serves from the buffers, past the gate (vending.Segments).
// The allocator refuses a strict tag to normal takes (segment.ErrStrict):
// then only the tag's leader serves it from memory.
func (s *segments) TryTakeRanges(tag string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	if err := s.gate(); err != nil {
		return dst, false, err
	}
	rs, ok, err := s.alloc.TryTakeRanges(tag, dst, n)
	if !errors.Is(err, segment.ErrStrict) {
		return rs, ok, err
	}
	if s.strict == nil {
		return dst, false, errNoStrict
	}
	rs, ok, err = s.strict.TryTake(tag, dst, n)
	if errors.Is(err, segment.ErrNotStrict) { // normal again since: TakeRanges serves it
		return dst, false, nil
	}
	return rs, ok, err
}

// TakeRanges serves waiting for the store, past the gate (vending.Segments);
// a strict tag's requests wait for its leader, or take the lead.
func (s *segments) TakeRanges(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	if err := s.gate(); err != nil {
		return dst, err
	}
	for range 2 { // a tag whose mode changes under the call is asked for again
		rs, err := s.alloc.TakeRanges(ctx, tag, dst, n)
		if !errors.Is(err, segment.ErrStrict) {
			return rs, err
		}
		if s.strict == nil {
			return dst, errNoStrict
		}
		if rs, err = s.strict.Take(ctx, tag, dst, n); !errors.Is(err, segment.ErrNotStrict) {
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
		s.strict.Close(context.Background())
	}
	s.alloc.Close()
	s.close()
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
