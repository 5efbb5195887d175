package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/segment"
)

// SegmentBucket is the KV bucket of segment rows: key = tag, value = the
// row as JSON.
const SegmentBucket = "leaf_segments"

// segmentCallTimeout bounds every call whose context has no earlier
// deadline.
const segmentCallTimeout = 10 * time.Second

// SegmentStore keeps Leaf-segment rows in a JetStream KV bucket: the
// embedded default when no Postgres is configured. Alloc is a
// compare-and-set on the key's revision, retried when another allocator
// wins, so every segment is handed out once, as with Postgres's row lock.
type SegmentStore struct {
	kv jetstream.KeyValue
}

var (
	_ segment.Store = (*SegmentStore)(nil)
)

// segmentRow is a row as the bucket stores it; the tag is the key. A
// deleted tag keeps its row, marked, so that a tag added again continues
// after every ID it ever handed out instead of starting over.
type segmentRow struct {
	MaxID       int64     `json:"max_id"`
	Step        int64     `json:"step"`
	Description string    `json:"description,omitempty"`
	Updated     time.Time `json:"update_time"`
	Deleted     bool      `json:"deleted,omitempty"`
}

// NewSegmentStore opens the bucket, creating it with replicas copies when
// it is missing.
func NewSegmentStore(ctx context.Context, js jetstream.JetStream, replicas int) (*SegmentStore, error) {
	kv, err := openOrCreate(ctx, js, jetstream.KeyValueConfig{
		Bucket:      SegmentBucket,
		Description: "leaf-nats segment rows: key = tag, value = max_id and step",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, err
	}
	return &SegmentStore{kv: kv}, nil
}

// get returns tag's row and its revision; a deleted row is unknown.
func (s *SegmentStore) get(ctx context.Context, tag string) (segmentRow, uint64, error) {
	r, rev, err := s.getAny(ctx, tag)
	if err == nil && r.Deleted {
		err = &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	return r, rev, err
}

// getAny returns tag's row, deleted or not, and its revision.
func (s *SegmentStore) getAny(ctx context.Context, tag string) (segmentRow, uint64, error) {
	e, err := s.kv.Get(ctx, tag)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return segmentRow{}, 0, &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	if err != nil {
		return segmentRow{}, 0, err
	}
	var r segmentRow
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return segmentRow{}, 0, fmt.Errorf("row in bucket %s is not JSON: %w", SegmentBucket, err)
	}
	return r, e.Revision(), nil
}

// update applies change to tag's row with compare-and-set, retrying while
// other writers win, and returns the row written.
func (s *SegmentStore) update(ctx context.Context, tag string, change func(*segmentRow) error) (segmentRow, error) {
	ctx, cancel := context.WithTimeout(ctx, segmentCallTimeout)
	defer cancel()
	if err := segment.ValidateTag(tag); err != nil {
		return segmentRow{}, err
	}
	for {
		r, rev, err := s.get(ctx, tag)
		if err != nil {
			return segmentRow{}, err
		}
		if err := change(&r); err != nil {
			return segmentRow{}, err
		}
		r.Updated = time.Now().UTC()
		v, err := json.Marshal(r)
		if err != nil {
			return segmentRow{}, err
		}
		_, err = s.kv.Update(ctx, tag, v, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		return r, err
	}
}

// Alloc advances tag's max_id by step (the row's step when 0) and returns
// the row after the update.
func (s *SegmentStore) Alloc(ctx context.Context, tag string, step int64) (segment.Row, error) {
	r, err := s.update(ctx, tag, func(r *segmentRow) error {
		inc := step
		if inc == 0 {
			inc = r.Step
		}
		if inc < 1 || r.MaxID > math.MaxInt64-inc {
			return fmt.Errorf("max_id %d + step %d is out of range", r.MaxID, inc)
		}
		r.MaxID += inc
		return nil
	})
	if err != nil {
		return segment.Row{}, fmt.Errorf("kv: alloc %q: %w", tag, err)
	}
	return r.row(tag), nil
}

func (r segmentRow) row(tag string) segment.Row {
	return segment.Row{Tag: tag, MaxID: r.MaxID, Step: r.Step, Description: r.Description, Updated: r.Updated}
}

// Tags lists every tag, ordered.
func (s *SegmentStore) Tags(ctx context.Context) ([]string, error) {
	rows, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	tags := make([]string, len(rows))
	for i, r := range rows {
		tags[i] = r.Tag
	}
	return tags, nil
}

// List returns every row, ordered by tag.
func (s *SegmentStore) List(ctx context.Context) ([]segment.Row, error) {
	ctx, cancel := context.WithTimeout(ctx, segmentCallTimeout)
	defer cancel()
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("kv: list rows: %w", err)
	}
	defer w.Stop()
	var rows []segment.Row
	for {
		select {
		case e := <-w.Updates():
			if e == nil { // every current row has been sent
				slices.SortFunc(rows, func(a, b segment.Row) int { return strings.Compare(a.Tag, b.Tag) })
				return rows, nil
			}
			var r segmentRow
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				return nil, fmt.Errorf("kv: row %q in bucket %s is not JSON: %w", e.Key(), SegmentBucket, err)
			}
			if !r.Deleted {
				rows = append(rows, r.row(e.Key()))
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("kv: list rows: %w", ctx.Err())
		}
	}
}

// Create adds r; a MaxID of 0 starts the tag at 1.
func (s *SegmentStore) Create(ctx context.Context, r segment.Row) error {
	if err := segment.ValidateRow(r); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, segmentCallTimeout)
	defer cancel()
	row := segmentRow{MaxID: max(r.MaxID, 1), Step: r.Step, Description: r.Description, Updated: time.Now().UTC()}
	v, err := json.Marshal(row)
	if err != nil {
		return err
	}
	_, err = s.kv.Create(ctx, r.Tag, v)
	for errors.Is(err, jetstream.ErrKeyExists) {
		old, rev, gerr := s.getAny(ctx, r.Tag)
		if gerr != nil {
			return fmt.Errorf("kv: create %q: %w", r.Tag, gerr)
		}
		if !old.Deleted {
			return &segment.TagError{Tag: r.Tag, Err: segment.ErrTagExists}
		}
		// Added again after a delete: continue after its last ID.
		again := row
		again.MaxID = max(row.MaxID, old.MaxID)
		if v, err = json.Marshal(again); err != nil {
			return err
		}
		if _, err = s.kv.Update(ctx, r.Tag, v, rev); errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			err = jetstream.ErrKeyExists // changed meanwhile: look again
		}
	}
	if err != nil {
		return fmt.Errorf("kv: create %q: %w", r.Tag, err)
	}
	return nil
}

// SetStep changes tag's step.
func (s *SegmentStore) SetStep(ctx context.Context, tag string, step int64) error {
	if err := segment.ValidateStep(step); err != nil {
		return err
	}
	_, err := s.update(ctx, tag, func(r *segmentRow) error {
		r.Step = step
		return nil
	})
	if err != nil && !errors.Is(err, segment.ErrUnknownTag) {
		return fmt.Errorf("kv: set step %q: %w", tag, err)
	}
	return err
}

// Delete marks tag's row deleted, keeping its max_id for a later Create.
func (s *SegmentStore) Delete(ctx context.Context, tag string) error {
	_, err := s.update(ctx, tag, func(r *segmentRow) error {
		r.Deleted = true
		return nil
	})
	if err != nil && !errors.Is(err, segment.ErrUnknownTag) {
		return fmt.Errorf("kv: delete %q: %w", tag, err)
	}
	return err
}
