package segment

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. The vending layer maps them to reply codes:
// ErrInvalidTag and ErrInvalidStep to 400, ErrUnknownTag to 404,
// ErrUnavailable to 503.
var (
	ErrInvalidTag  = errors.New("segment: invalid tag")
	ErrInvalidStep = errors.New("segment: invalid step")
	ErrUnknownTag  = errors.New("segment: unknown tag")
	ErrTagExists   = errors.New("segment: tag already exists")
	ErrUnavailable = errors.New("segment: no segment available")
)

// Row is one business tag as a store keeps it (Leaf's leaf_alloc row).
type Row struct {
	Tag         string
	MaxID       int64 // next value to hand out; the row's segments so far end here
	Step        int64 // the table's (minimum) step
	Description string
	Updated     time.Time
}

// Store is what the allocator needs from a table of tags. Implementations:
// segment/pgstore (Postgres) and kv.SegmentStore (JetStream KV).
type Store interface {
	// Alloc advances the tag's max_id by step (the row's own step when step
	// is 0) atomically and returns the row as it is after the update. The
	// caller serves [row.MaxID-step, row.MaxID). ErrUnknownTag when the tag
	// has no row.
	Alloc(ctx context.Context, tag string, step int64) (Row, error)
	// Tags lists every tag name.
	Tags(ctx context.Context) ([]string, error)
}
