package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WorkerRecord is what the buckets hold of one worker ID, for operators
// (`vendor cluster workers`).
type WorkerRecord struct {
	ID int
	// Held: its lease key exists, last written at Renewed by Holder.
	Held    bool
	Holder  string
	Renewed time.Time
	// Recorded: its last timestamp is recorded, LastMs with the holder's
	// epoch (0: unknown).
	Recorded      bool
	LastMs, Epoch int64
	// Problem is why a record cannot be believed (ErrCorrupt), or why the
	// last timestamp is implausible; nil when neither.
	Problem error
}

// Workers returns the record of every worker ID either bucket holds a key
// of, ordered by ID.
func Workers(ctx context.Context, js JS) ([]WorkerRecord, error) {
	recs := map[int]*WorkerRecord{}
	at := func(id int) *WorkerRecord {
		if recs[id] == nil {
			recs[id] = &WorkerRecord{ID: id}
		}
		return recs[id]
	}
	now := time.Now()
	err := eachKey(ctx, js, js.Workers, func(id int, e jetstream.KeyValueEntry) {
		r := at(id)
		r.Held, r.Renewed = true, e.Created()
		if v, err := decodeLeaseValue(e.Value()); err != nil {
			r.Problem = Corrupt(js.Workers, e.Key(), e.Revision(), e.Value(), err, "")
		} else {
			r.Holder = v.Holder
		}
	})
	if err == nil {
		err = eachKey(ctx, js, js.Clocks, func(id int, e jetstream.KeyValueEntry) {
			r := at(id)
			ms, epoch, err := ParseClock(e.Value())
			switch {
			case err != nil:
				r.Problem = Corrupt(js.Clocks, e.Key(), e.Revision(), e.Value(), err, "")
			case time.UnixMilli(ms).Sub(now) > FarAhead:
				r.Problem = fmt.Errorf("its last timestamp is %v ahead of this clock", time.UnixMilli(ms).Sub(now).Round(time.Second))
			}
			r.Recorded, r.LastMs, r.Epoch = err == nil, ms, epoch
		})
	}
	if err != nil {
		return nil, err
	}
	out := make([]WorkerRecord, 0, len(recs))
	for _, r := range recs {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b WorkerRecord) int { return a.ID - b.ID })
	return out, nil
}

// eachKey calls f with every worker ID key of bucket. It finds the keys in
// the stream's subjects and reads each with a direct get: no consumer, so
// that it works while the JetStream has no meta leader (a supercluster
// split by a partition), as everything on the serving path must.
func eachKey(ctx context.Context, js jetstream.JetStream, bucket string, f func(id int, e jetstream.KeyValueEntry)) error {
	b, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kv: open bucket %s: %w", bucket, err)
	}
	keys, err := KeysOf(ctx, js, bucket, "worker.>")
	if err != nil {
		return err
	}
	for _, k := range keys {
		id, err := strconv.Atoi(strings.TrimPrefix(k, "worker."))
		if err != nil {
			continue
		}
		e, err := b.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue // deleted, or expired, since
		case err != nil:
			return fmt.Errorf("kv: read %s %s: %w", bucket, k, err)
		}
		f(id, e)
	}
	return nil
}

// ErrPlausible is returned by ResetWorker for a last timestamp that can be
// believed: resetting it could repeat IDs.
var ErrPlausible = errors.New("kv: the last timestamp is plausible")

// ResetWorker replaces a corrupt or implausible last timestamp of worker ID
// id with one longest past now: past the deadline of any holder whose clock
// agrees with this one (a live holder's next renewal finds the key changed
// and gives the ID up). A timestamp that can be believed is kept
// (ErrPlausible) unless force. It returns the value replaced.
func ResetWorker(ctx context.Context, js JS, id int, longest time.Duration, force bool) (was []byte, to int64, err error) {
	clocks, err := js.KeyValue(ctx, js.Clocks)
	if err != nil {
		return nil, 0, fmt.Errorf("kv: open bucket %s: %w", js.Clocks, err)
	}
	e, err := clocks.Get(ctx, leaseKey(id))
	if err != nil {
		return nil, 0, fmt.Errorf("kv: read the last timestamp of worker ID %d: %w", id, err)
	}
	ms, epoch, perr := ParseClock(e.Value())
	if perr == nil && time.Until(time.UnixMilli(ms)) <= FarAhead && !force {
		return e.Value(), 0, fmt.Errorf("%w: worker ID %d's last timestamp %s (%s) is not corrupt, nor more than %v ahead of this clock: a holder may have used every millisecond up to it",
			ErrPlausible, id, e.Value(), time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), FarAhead)
	}
	to = time.Now().Add(longest + 2*time.Second).UnixMilli()
	if _, err := clocks.Update(ctx, leaseKey(id), clockValue(to, epoch), e.Revision()); err != nil {
		return e.Value(), 0, fmt.Errorf("kv: reset the last timestamp of worker ID %d (run the command again): %w", id, err)
	}
	return e.Value(), to, nil
}

// Holders returns, for every worker ID held, the instance that holds it
// (its lease's value names it); a lease that cannot be read names none.
func Holders(ctx context.Context, js JS) (map[int]string, error) {
	out := map[int]string{}
	err := eachKey(ctx, js, js.Workers, func(id int, e jetstream.KeyValueEntry) {
		if v, err := decodeLeaseValue(e.Value()); err == nil {
			out[id] = v.Holder
		} else {
			out[id] = ""
		}
	})
	return out, err
}
