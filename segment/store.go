package segment

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. The vending layer maps them to reply codes:
// ErrInvalidTag and ErrInvalidStep to 400, ErrUnknownTag to 404,
// ErrRateLimited to 429, ErrUnavailable and ErrStoreMoved to 503.
var (
	ErrInvalidTag  = errors.New("segment: invalid tag")
	ErrInvalidStep = errors.New("segment: invalid step")
	ErrUnknownTag  = errors.New("segment: unknown tag")
	ErrTagExists   = errors.New("segment: tag already exists")
	ErrUnavailable = errors.New("segment: no segment available")
	// ErrStoreMoved is returned by a store whose segments were moved to
	// another store: it hands out no segment and takes no new tag.
	ErrStoreMoved = errors.New("segment: the segments of this store were moved to another store")
	// ErrStrict is returned for a strict tag by the calls that serve
	// normal tags: only the tag's leader serves it (TakeStrict). ErrNotStrict
	// is the converse, for a tag that is normal again.
	ErrStrict    = errors.New("segment: strict tag, served by its leader")
	ErrNotStrict = errors.New("segment: not a strict tag")
	// ErrRateLimited is returned by a take beyond Options.RateLimit.
	ErrRateLimited = errors.New("segment: rate limited")
	// ErrExhausted is returned for a tag whose IDs are used up: its
	// max_id reached the end of its IDs (the largest int64, or its
	// region's last). Waiting cannot help.
	ErrExhausted = errors.New("segment: the tag's IDs are used up: its max_id reached the end of its IDs; use another tag")
	// ErrOtherRegion is wrapped for a row whose max_id is not in the
	// allocator's region (Options.Block): the store is another region's.
	ErrOtherRegion = errors.New("segment: the row is another region's")
	// ErrRefused is wrapped by a store that refuses this client for a
	// reason waiting cannot fix: a wrong user or password, a database that
	// does not exist.
	ErrRefused = errors.New("segment: the store refused this client")
)

// Row is one business tag as a store keeps it (Leaf's leaf_alloc row).
type Row struct {
	Tag         string
	MaxID       int64 // next value to hand out; the row's segments so far end here
	Step        int64 // the table's (minimum) step
	Description string
	Updated     time.Time
	// Retired marks a deleted tag, of which a store keeps the max_id so
	// that a tag added again continues after it (in the rows a store's
	// Seal returns, and in those its Raise takes).
	Retired bool
	// Strict marks a strict tag: one vendor at a time serves it, so that
	// its IDs increase across the whole cluster (package strict). It is
	// kept beside Leaf's columns; a row without it is a normal tag.
	Strict bool
	// Home is a strict tag's home region (LEAF_REGION): only vendors of
	// that region lead it, so that its IDs are ordered across every
	// region; "" with no regions.
	Home string
	// Allocated is, in a row Alloc returns, how many IDs it allocated:
	// [MaxID-Allocated, MaxID). It is the step asked for, or fewer when the
	// tag's IDs run out (the last segment is what is left below the
	// largest int64).
	Allocated int64
}

// StoreInfo is what a store says of itself.
type StoreInfo struct {
	// ID is the store's identity: a random value kept in the store itself
	// (a row of Postgres, a key of the KV bucket), so that two stores, say
	// two databases, are told apart, and where this copy of it lives (the
	// Postgres system, database and table; the stream's creation), so that
	// a copy (a restored backup, a cloned database) is told apart from its
	// original.
	ID      string
	Created time.Time
	// MovedTo names the store its segments were moved to, once they were
	// (a store's Seal); it then hands out no more.
	MovedTo string
	MovedAt time.Time
}

// Store is what the allocator needs from a table of tags. Implementations:
// segment/pgstore (Postgres) and kvstore.Store (JetStream KV).
type Store interface {
	// Alloc advances the tag's max_id by step (the row's own step when step
	// is 0), or by what is left below the largest int64 when that is less,
	// atomically, and returns the row as it is after the update. The
	// caller serves [row.MaxID-row.Allocated, row.MaxID). ErrUnknownTag
	// when the tag has no row, ErrExhausted when nothing is left. floor, when not nil, runs while no other allocation of
	// the tag can commit, with the max_id read; the allocation starts from
	// what it returns, which must be at least that.
	Alloc(ctx context.Context, tag string, step int64, floor Floor) (Row, error)
	// Tags lists every tag, ordered, with whether it is strict (MaxID,
	// Step and the rest may be left zero).
	Tags(ctx context.Context) ([]Row, error)
	// Tag reads one tag: whether it exists and is strict (the rest may be
	// left zero), in one single-row read whatever the number of tags.
	// ErrUnknownTag when it has no row. A row that cannot be read is a
	// normal tag, whose allocations fail with the reason.
	Tag(ctx context.Context, tag string) (Row, error)
}

// AdminStore is a Store that can also be managed: what `vendor tags` and
// `vendor cluster` use, and what both stores implement.
type AdminStore interface {
	Store
	// Create adds a row; ErrTagExists when the tag has one.
	Create(ctx context.Context, r Row) error
	// List returns every row, ordered by tag.
	List(ctx context.Context) ([]Row, error)
	// SetStep changes a row's step; ErrUnknownTag when absent.
	SetStep(ctx context.Context, tag string, step int64) error
	// SetStrict makes a tag strict, with home its home region ("" with
	// no regions), or normal; ErrUnknownTag when absent.
	SetStrict(ctx context.Context, tag string, strict bool, home string) error
	// Delete removes a row; ErrUnknownTag when absent.
	Delete(ctx context.Context, tag string) error
	// Info returns the store's identity (recording one the first time)
	// and whether its segments moved to another store.
	Info(ctx context.Context) (StoreInfo, error)
	// Seal marks the segments moved to the store named to and returns
	// every row, live and retired, as of then; no allocation succeeds
	// after it.
	Seal(ctx context.Context, to string) ([]Row, error)
	// Unseal makes a sealed store serve again.
	Unseal(ctx context.Context) error
	// Raise makes every ID handed out for the row's tag from now on at
	// least its MaxID, creating the row if needed; it never lowers one.
	Raise(ctx context.Context, r Row) error
}
