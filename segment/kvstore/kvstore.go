// Package kvstore is the segment store (segment.Store) kept in a JetStream
// KV bucket (kv.SegmentBucket, or its region's): the embedded default when
// no Postgres is configured, beside segment/pgstore. A row is the tag's key
// with Leaf's leaf_alloc columns as JSON; Alloc is a compare-and-set on
// the key's revision, and a seal on every row moves the segments to
// another store (segment.Move).
package kvstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
)

// segmentCallTimeout bounds every call whose context has no earlier
// deadline.
const segmentCallTimeout = 10 * time.Second

// Store keeps Leaf-segment rows in a JetStream KV bucket: the
// embedded default when no Postgres is configured. Alloc is a
// compare-and-set on the key's revision, retried when another allocator
// wins, so every segment is handed out once, as with Postgres's row lock.
type Store struct {
	js     kv.JS
	bucket jetstream.KeyValue
}

var (
	_ segment.Store = (*Store)(nil)
)

// segmentRow is a row as the bucket stores it; the tag is the key. A
// deleted tag keeps its row, marked, so that a tag added again continues
// after every ID it ever handed out instead of starting over. MovedTo is
// set on every row when the store's segments are moved to another store:
// compare-and-set covers one key, so each row carries the seal that its
// allocations check.
type segmentRow struct {
	MaxID       int64     `json:"max_id"`
	Step        int64     `json:"step"`
	Description string    `json:"description,omitempty"`
	Updated     time.Time `json:"update_time"`
	Deleted     bool      `json:"deleted,omitempty"`
	MovedTo     string    `json:"moved_to,omitempty"`
	Strict      bool      `json:"strict,omitempty"`
	Home        string    `json:"home,omitempty"`
}

// storeKey holds the store's identity (storeRecord). It is no tag: tags
// cannot hold '='.
const storeKey = "=store"

// storeRecord is the store's identity and seal, as the bucket keeps it.
type storeRecord struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	MovedTo string    `json:"moved_to,omitempty"`
	MovedAt time.Time `json:"moved_at,omitzero"`
}

func segmentBucketConfig(js kv.JS, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      js.Segments,
		Placement:   js.Placement,
		Description: "leaf-nats segment rows: key = tag, value = max_id and step",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// New opens the bucket, creating it with replicas copies when
// it is missing.
func New(ctx context.Context, js kv.JS, replicas int) (*Store, error) {
	b, err := kv.OpenOrCreate(ctx, js, segmentBucketConfig(js, replicas))
	if err != nil {
		return nil, err
	}
	return &Store{js: js, bucket: b}, nil
}

// Open opens the bucket, which must exist: a store the cluster
// contract names is never created again empty, since its tags would start
// over.
func Open(ctx context.Context, js kv.JS) (*Store, error) {
	b, err := js.KeyValue(ctx, js.Segments)
	if err != nil {
		return nil, fmt.Errorf("kvstore: open bucket %s: %w", js.Segments, err)
	}
	return &Store{js: js, bucket: b}, nil
}

// get returns tag's row and its revision; a deleted row is unknown.
func (s *Store) get(ctx context.Context, tag string) (segmentRow, uint64, error) {
	r, rev, err := s.getAny(ctx, tag)
	if err == nil && r.Deleted {
		err = &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	return r, rev, err
}

// getAny returns tag's row, deleted or not, and its revision.
func (s *Store) getAny(ctx context.Context, tag string) (segmentRow, uint64, error) {
	e, err := s.bucket.Get(ctx, tag)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return segmentRow{}, 0, &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	if err != nil {
		return segmentRow{}, 0, err
	}
	r, err := decodeSegmentRow(e.Value())
	if err != nil {
		return segmentRow{}, e.Revision(), s.corruptRow(tag, e.Revision(), e.Value(), err)
	}
	return r, e.Revision(), nil
}

// corruptRow is the error of a row that cannot be believed: its tag is
// served no more until it is repaired, since its max_id is unknown.
func (s *Store) corruptRow(tag string, rev uint64, v []byte, err error) *kv.CorruptError {
	return kv.Corrupt(s.bucket.Bucket(), tag, rev, v, err, fmt.Sprintf(
		"Tag %q is not served until its row is repaired: vendor tags raise %s <an ID above every one it handed out>", tag, tag))
}

// update applies change to tag's row with compare-and-set, retrying while
// other writers win, and returns the row written. A deleted tag is unknown.
func (s *Store) update(ctx context.Context, tag string, change func(*segmentRow) error) (segmentRow, error) {
	return s.apply(ctx, tag, s.get, change)
}

// updateAny is update for rows of deleted tags too.
func (s *Store) updateAny(ctx context.Context, tag string, change func(*segmentRow) error) (segmentRow, error) {
	return s.apply(ctx, tag, s.getAny, change)
}

func (s *Store) apply(ctx context.Context, tag string, get func(context.Context, string) (segmentRow, uint64, error), change func(*segmentRow) error) (segmentRow, error) {
	ctx, cancel := context.WithTimeout(ctx, segmentCallTimeout)
	defer cancel()
	if err := segment.ValidateTag(tag); err != nil {
		return segmentRow{}, err
	}
	for {
		r, rev, err := get(ctx, tag)
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
		_, err = s.bucket.Update(ctx, tag, v, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		return r, err
	}
}

// Alloc advances tag's max_id by step (the row's step when 0) and returns
// the row after the update. floor runs between the read of the row and its
// compare-and-set, which fails (and the allocation reads again) if any
// other allocation of the tag committed meanwhile.
func (s *Store) Alloc(ctx context.Context, tag string, step int64, floor segment.Floor) (segment.Row, error) {
	var allocated int64
	r, err := s.update(ctx, tag, func(r *segmentRow) error {
		inc := step
		if inc == 0 {
			inc = r.Step
		}
		if r.MovedTo != "" {
			return fmt.Errorf("%w: to %s", segment.ErrStoreMoved, r.MovedTo)
		}
		if inc < 1 {
			return fmt.Errorf("max_id %d: step %d is out of range; fix it with: vendor tags set-step %s 1000", r.MaxID, inc, tag)
		}
		base, end := r.MaxID, segment.Whole.End
		if floor != nil {
			var err error
			if base, end, err = floor(r.MaxID, inc); err != nil {
				return err
			}
			if base < r.MaxID {
				return fmt.Errorf("the floor of max_id %d is %d, below it (a bug)", r.MaxID, base)
			}
		}
		if allocated = segment.Grant(base, inc, end); allocated == 0 {
			return &segment.TagError{Tag: tag, Err: segment.ErrExhausted}
		}
		r.MaxID = base + allocated
		return nil
	})
	if err != nil {
		return segment.Row{}, fmt.Errorf("kvstore: alloc %q: %w", tag, err)
	}
	row := r.row(tag)
	row.Allocated = allocated
	return row, nil
}

// errNotReturned stops a Return whose row moved on.
var errNotReturned = errors.New("kvstore: the row moved on")

// Return sets tag's max_id back to to if it is from, in one compare-and-set
// (segment.Returner): IDs a vendor held unused at the top, given back at a
// clean stop. A strict tag's row is never set back.
func (s *Store) Return(ctx context.Context, tag string, from, to int64) (bool, error) {
	_, err := s.update(ctx, tag, func(r *segmentRow) error {
		if r.MaxID != from || r.Strict || r.MovedTo != "" || to < 0 || to > from {
			return errNotReturned
		}
		r.MaxID = to
		return nil
	})
	if errors.Is(err, errNotReturned) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("kvstore: give back IDs of %q: %w", tag, err)
	}
	return true, nil
}

var _ segment.Returner = (*Store)(nil)

func (r segmentRow) row(tag string) segment.Row {
	return segment.Row{Tag: tag, MaxID: r.MaxID, Step: r.Step, Description: r.Description, Updated: r.Updated, Retired: r.Deleted, Strict: r.Strict, Home: r.Home}
}

// Tags lists every tag, ordered, with its mode. A tag whose row is corrupt
// is listed too (as a normal tag): its allocations fail with the reason.
func (s *Store) Tags(ctx context.Context) ([]segment.Row, error) {
	rows, bad, err := s.list(ctx, false)
	if err != nil {
		return nil, err
	}
	for _, b := range bad {
		rows = append(rows, segment.Row{Tag: b.Key})
	}
	slices.SortFunc(rows, func(a, b segment.Row) int { return strings.Compare(a.Tag, b.Tag) })
	return rows, nil
}

// Tag reads tag's row, as Tags lists it: one direct get.
func (s *Store) Tag(ctx context.Context, tag string) (segment.Row, error) {
	ctx, cancel := context.WithTimeout(ctx, segmentCallTimeout)
	defer cancel()
	r, _, err := s.get(ctx, tag)
	var ce *kv.CorruptError
	switch {
	case errors.As(err, &ce):
		return segment.Row{Tag: tag}, nil
	case err != nil:
		return segment.Row{}, fmt.Errorf("kvstore: read tag %q: %w", tag, err)
	}
	return r.row(tag), nil
}

// List returns every row, ordered by tag. Rows that are corrupt are left
// out and named by the error, which wraps kv.ErrCorrupt.
func (s *Store) List(ctx context.Context) ([]segment.Row, error) {
	rows, bad, err := s.list(ctx, false)
	if err != nil {
		return nil, err
	}
	return rows, corruptRows(bad)
}

// corruptRows joins the errors of corrupt rows, nil when there are none.
func corruptRows(bad []*kv.CorruptError) error {
	errs := make([]error, len(bad))
	for i, b := range bad {
		errs[i] = b
	}
	return errors.Join(errs...)
}

// list returns every row, with all the rows of deleted tags too (Retired).
//
// A watcher's first pass over the bucket can miss a key that is updated
// while it runs (each update replaces the key's only message, and the
// watcher can pass the old one after it is gone and finish before the new
// one): an allocation racing a list would hide its tag. The stream's
// subjects, read after the watcher, name every key that existed before the
// list began; a key the watcher missed is read on its own.
// The rows that are corrupt are returned apart, bad.
func (s *Store) list(ctx context.Context, all bool) (out []segment.Row, bad []*kv.CorruptError, err error) {
	ctx, cancel := context.WithTimeout(ctx, segmentCallTimeout)
	defer cancel()
	rows, bad, err := s.watchRows(ctx)
	if err != nil {
		return nil, nil, err
	}
	keys, err := s.keys(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, key := range keys {
		if _, ok := rows[key]; ok || segment.ValidateTag(key) != nil || slices.ContainsFunc(bad, func(b *kv.CorruptError) bool { return b.Key == key }) {
			continue
		}
		r, _, err := s.getAny(ctx, key)
		var ce *kv.CorruptError
		switch {
		case errors.Is(err, segment.ErrUnknownTag):
			continue // deleted since
		case errors.As(err, &ce):
			bad = append(bad, ce)
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("kvstore: list rows: %w", err)
		}
		rows[key] = r
	}
	out = make([]segment.Row, 0, len(rows))
	for key, r := range rows {
		if !r.Deleted || all {
			out = append(out, r.row(key))
		}
	}
	slices.SortFunc(out, func(a, b segment.Row) int { return strings.Compare(a.Tag, b.Tag) })
	return out, bad, nil
}

// watchRows returns the rows a watcher's first pass finds, by tag, and the
// corrupt ones apart.
func (s *Store) watchRows(ctx context.Context) (map[string]segmentRow, []*kv.CorruptError, error) {
	w, err := s.bucket.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, nil, fmt.Errorf("kvstore: list rows: %w", err)
	}
	defer w.Stop()
	rows := map[string]segmentRow{}
	var bad []*kv.CorruptError
	for {
		select {
		case e := <-w.Updates():
			if e == nil { // the first pass is over
				return rows, bad, nil
			}
			if segment.ValidateTag(e.Key()) != nil {
				continue // the store's own record
			}
			r, err := decodeSegmentRow(e.Value())
			if err != nil {
				bad = append(bad, s.corruptRow(e.Key(), e.Revision(), e.Value(), err))
				continue
			}
			rows[e.Key()] = r
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("kvstore: list rows: %w", ctx.Err())
		}
	}
}

// keys returns every key of the bucket, as the stream's subjects name them.
func (s *Store) keys(ctx context.Context) ([]string, error) {
	return kv.KeysOf(ctx, s.js, s.bucket.Bucket(), ">")
}

// Create adds r; a MaxID of 0 starts the tag at 1.
func (s *Store) Create(ctx context.Context, r segment.Row) error {
	if err := segment.ValidateRow(r); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, segmentCallTimeout)
	defer cancel()
	row := segmentRow{MaxID: max(r.MaxID, 1), Step: r.Step, Description: r.Description, Updated: time.Now().UTC(), Strict: r.Strict, Home: r.Home}
	v, err := json.Marshal(row)
	if err != nil {
		return err
	}
	_, err = s.bucket.Create(ctx, r.Tag, v)
	fresh := err == nil // no row of the tag before, deleted or not
	for errors.Is(err, jetstream.ErrKeyExists) {
		old, rev, gerr := s.getAny(ctx, r.Tag)
		if gerr != nil {
			return fmt.Errorf("kvstore: create %q: %w", r.Tag, gerr)
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
		if _, err = s.bucket.Update(ctx, r.Tag, v, rev); errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			err = jetstream.ErrKeyExists // changed meanwhile: look again
		}
	}
	if err != nil {
		return fmt.Errorf("kvstore: create %q: %w", r.Tag, err)
	}
	// A Seal that listed the rows before this one was created did not
	// mark it: look at the store's seal after creating, and mark it here.
	if info, err := s.Info(ctx); err != nil {
		return fmt.Errorf("kvstore: create %q: %w", r.Tag, err)
	} else if info.MovedTo != "" {
		// Undo: a tag new to the store goes, a deleted one stays deleted.
		if fresh {
			err = s.bucket.Purge(ctx, r.Tag)
		} else {
			_, err = s.updateAny(ctx, r.Tag, func(row *segmentRow) error {
				row.Deleted, row.MovedTo = true, info.MovedTo
				return nil
			})
		}
		if err != nil {
			return fmt.Errorf("kvstore: create %q in a sealed store, and undo it: %w", r.Tag, err)
		}
		return fmt.Errorf("kvstore: create %q: %w: to %s", r.Tag, segment.ErrStoreMoved, info.MovedTo)
	}
	return nil
}

// SetStrict makes tag strict, or normal again.
func (s *Store) SetStrict(ctx context.Context, tag string, strict bool, home string) error {
	_, err := s.update(ctx, tag, func(r *segmentRow) error {
		r.Strict, r.Home = strict, home
		if !strict {
			r.Home = ""
		}
		return nil
	})
	if err != nil && !errors.Is(err, segment.ErrUnknownTag) {
		return fmt.Errorf("kvstore: set mode of %q: %w", tag, err)
	}
	return err
}

// SetStep changes tag's step.
func (s *Store) SetStep(ctx context.Context, tag string, step int64) error {
	if err := segment.ValidateStep(step); err != nil {
		return err
	}
	_, err := s.update(ctx, tag, func(r *segmentRow) error {
		r.Step = step
		return nil
	})
	if err != nil && !errors.Is(err, segment.ErrUnknownTag) {
		return fmt.Errorf("kvstore: set step %q: %w", tag, err)
	}
	return err
}

// Delete marks tag's row deleted, keeping its max_id for a later Create.
func (s *Store) Delete(ctx context.Context, tag string) error {
	_, err := s.update(ctx, tag, func(r *segmentRow) error {
		r.Deleted = true
		return nil
	})
	if err != nil && !errors.Is(err, segment.ErrUnknownTag) {
		return fmt.Errorf("kvstore: delete %q: %w", tag, err)
	}
	return err
}

// Info returns the store's identity, recording one the first time, and
// where its segments moved if they did.
func (s *Store) Info(ctx context.Context) (segment.StoreInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, segmentCallTimeout)
	defer cancel()
	rec, _, err := s.record(ctx)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return segment.StoreInfo{}, err
		}
		rec = storeRecord{ID: hex.EncodeToString(b), Created: time.Now().UTC()}
		v, _ := json.Marshal(rec)
		if _, err = s.bucket.Create(ctx, storeKey, v); errors.Is(err, jetstream.ErrKeyExists) {
			rec, _, err = s.record(ctx) // recorded by someone else meanwhile
		}
	}
	if err != nil {
		return segment.StoreInfo{}, fmt.Errorf("kvstore: identity of bucket %s: %w", s.bucket.Bucket(), err)
	}
	// The key is copied with the data (a stream backup restored, a
	// mirror); the stream's creation is not, so a copy has an identity of
	// its own.
	st, err := s.bucket.Status(ctx)
	if err != nil {
		return segment.StoreInfo{}, fmt.Errorf("kvstore: status of bucket %s: %w", s.bucket.Bucket(), err)
	}
	id := rec.ID
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		id += "@" + strconv.FormatInt(bs.StreamInfo().Created.UnixNano(), 36)
	}
	return segment.StoreInfo{ID: id, Created: rec.Created, MovedTo: rec.MovedTo, MovedAt: rec.MovedAt}, nil
}

func (s *Store) record(ctx context.Context) (storeRecord, uint64, error) {
	e, err := s.bucket.Get(ctx, storeKey)
	if err != nil {
		return storeRecord{}, 0, err
	}
	rec, err := decodeStoreRecord(e.Value())
	if err != nil {
		return storeRecord{}, 0, kv.Corrupt(s.bucket.Bucket(), storeKey, e.Revision(), e.Value(), err,
			"It is the store's identity, which the cluster contract names; restore it (nats kv history "+s.bucket.Bucket()+" "+storeKey+")")
	}
	return rec, e.Revision(), nil
}

// setMovedTo records in the store's own key that its segments moved to to
// ("" to serve again).
func (s *Store) setMovedTo(ctx context.Context, to string) error {
	if _, err := s.Info(ctx); err != nil { // the key exists from here on
		return err
	}
	for {
		rec, rev, err := s.record(ctx)
		if err != nil {
			return err
		}
		if rec.MovedTo != "" && to != "" && rec.MovedTo != to {
			return fmt.Errorf("%w: already to %s", segment.ErrStoreMoved, rec.MovedTo)
		}
		rec.MovedTo, rec.MovedAt = to, time.Now().UTC()
		if to == "" {
			rec.MovedAt = time.Time{}
		}
		v, _ := json.Marshal(rec)
		_, err = s.bucket.Update(ctx, storeKey, v, rev)
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err
		}
	}
}

// Seal marks the store's segments moved to the store named to, and returns
// every row, live and retired, as it was sealed: each row is marked with
// compare-and-set, so an allocation either landed before (and is in the row
// returned) or fails with segment.ErrStoreMoved. Sealing again for the same
// store is allowed (a move that resumes); for another, not.
func (s *Store) Seal(ctx context.Context, to string) ([]segment.Row, error) {
	ctx, cancel := context.WithTimeout(ctx, segmentCallTimeout)
	defer cancel()
	if err := s.setMovedTo(ctx, to); err != nil {
		return nil, fmt.Errorf("kvstore: seal: %w", err)
	}
	rows, bad, err := s.list(ctx, true)
	if err == nil {
		err = corruptRows(bad) // a row whose max_id is unknown cannot be carried over
	}
	if err != nil {
		return nil, fmt.Errorf("kvstore: seal: %w", err)
	}
	for i, r := range rows {
		sealed, err := s.updateAny(ctx, r.Tag, func(row *segmentRow) error {
			if row.MovedTo != "" && row.MovedTo != to {
				return fmt.Errorf("%w: row %q already to %s", segment.ErrStoreMoved, r.Tag, row.MovedTo)
			}
			row.MovedTo = to
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("kvstore: seal %q: %w", r.Tag, err)
		}
		rows[i] = sealed.row(r.Tag)
	}
	return rows, nil
}

// Unseal makes a store whose segments were moved away serve again: for a
// move back to it, after Raise has carried every row over.
func (s *Store) Unseal(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, segmentCallTimeout)
	defer cancel()
	if err := s.setMovedTo(ctx, ""); err != nil {
		return fmt.Errorf("kvstore: unseal: %w", err)
	}
	rows, bad, err := s.list(ctx, true)
	if err == nil {
		err = corruptRows(bad)
	}
	if err != nil {
		return fmt.Errorf("kvstore: unseal: %w", err)
	}
	for _, r := range rows {
		if _, err := s.updateAny(ctx, r.Tag, func(row *segmentRow) error { row.MovedTo = ""; return nil }); err != nil {
			return fmt.Errorf("kvstore: unseal %q: %w", r.Tag, err)
		}
	}
	return nil
}

// Raise makes every ID the store hands out for r.Tag from now on at least
// r.MaxID: it creates a live row (with r's step and description) or raises
// the one there; for a retired r it raises the row of the tag, deleted
// (created so) or live. It never lowers a max_id, so running it twice
// changes nothing. A corrupt row (kv.ErrCorrupt) is replaced by one made
// from r.
func (s *Store) Raise(ctx context.Context, r segment.Row) error {
	if err := segment.ValidateTag(r.Tag); err != nil {
		return err
	}
	if !r.Retired {
		if err := segment.ValidateRow(r); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, segmentCallTimeout)
	defer cancel()
	for {
		old, rev, err := s.getAny(ctx, r.Tag)
		row := old
		var bad *kv.CorruptError
		switch {
		case errors.Is(err, segment.ErrUnknownTag), errors.As(err, &bad):
			// A corrupt row is written anew, at its revision: r says
			// where the tag's IDs are to go on.
			row = segmentRow{MaxID: max(r.MaxID, 1), Step: r.Step, Description: r.Description, Deleted: r.Retired, Strict: r.Strict && !r.Retired, Home: r.Home}
			if r.Retired && bad != nil {
				row.Step = 1 // a deleted tag's row keeps no step of its own
			}
		case err != nil:
			return fmt.Errorf("kvstore: raise %q: %w", r.Tag, err)
		case row.Deleted && !r.Retired:
			row = segmentRow{MaxID: max(old.MaxID, r.MaxID, 1), Step: r.Step, Description: r.Description, MovedTo: old.MovedTo, Strict: r.Strict, Home: r.Home}
		case row.MaxID >= r.MaxID:
			return nil
		default:
			row.MaxID = r.MaxID
		}
		row.Updated = time.Now().UTC()
		v, err := json.Marshal(row)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = s.bucket.Create(ctx, r.Tag, v)
		} else {
			_, err = s.bucket.Update(ctx, r.Tag, v, rev)
		}
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return fmt.Errorf("kvstore: raise %q: %w", r.Tag, err)
		}
		return nil
	}
}
