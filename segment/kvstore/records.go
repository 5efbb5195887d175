package kvstore

import (
	"errors"
	"fmt"
	"math"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
)

// Every value read back from the bucket is decoded here and checked before
// it is believed (kv.CorruptError names one that is not).

// decodeSegmentRow reads a row of the KV segment store and checks it: a
// max_id of at least 1 (the first ID), a step in the step column's range
// (a deleted tag's row may have none), fields of the columns' widths.
func decodeSegmentRow(v []byte) (segmentRow, error) {
	var r segmentRow
	if err := kv.DecodeJSON(v, &r); err != nil {
		return segmentRow{}, err
	}
	var errs []error
	if r.MaxID < 1 {
		errs = append(errs, fmt.Errorf("max_id %d is below 1, the first ID", r.MaxID))
	}
	if (r.Step < 1 && !r.Deleted) || r.Step < 0 || r.Step > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("step %d is not within 1..%d", r.Step, math.MaxInt32))
	}
	if len(r.Description) > segment.MaxDescriptionLen || len(r.MovedTo) > 256 {
		errs = append(errs, errors.New("a description or seal longer than its column"))
	}
	return r, errors.Join(errs...)
}

// decodeStoreRecord reads the KV segment store's identity.
func decodeStoreRecord(v []byte) (storeRecord, error) {
	var rec storeRecord
	if err := kv.DecodeJSON(v, &rec); err != nil {
		return storeRecord{}, err
	}
	if rec.ID == "" || len(rec.ID) > 64 || rec.Created.IsZero() {
		return storeRecord{}, errors.New("no identity, or no time of creation")
	}
	return rec, nil
}
