package kv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/lease"
)

// fencedKey is one claim's hold on a key in a bucket whose TTL expires
// keys that are not renewed: a worker ID's lease (Lease) and a strict
// tag's lead (Lead) are each one. Create is the claim, so two claimants
// never share a key; each renewal is an Update against the revision this
// claim last wrote, which resets the TTL; a release deletes the key at
// that revision.
//
// A revision alone is no fence once a store goes back: a NATS server that
// lost unsynced writes, or a store directory restored, issues its
// revisions again, so a matching revision may be another claim's. The
// value holds a token random to each claim, and a renewal first reads the
// key back and checks that it holds this claim's value, at a revision
// this claim wrote or later.
type fencedKey struct {
	kv    jetstream.KeyValue
	key   string
	what  string // names the hold in errors: "worker ID 7", `the lead of "ledger"`
	value []byte // this claim's, with its token
	rev   uint64 // the last revision this claim wrote, or read back as its own
	ttl   time.Duration
	clock lease.Nower               // what deadlines are read on
	owner func(value []byte) string // who a value says holds the key
}

// create claims the key: jetstream.ErrKeyExists when someone holds it.
func (k *fencedKey) create(ctx context.Context) error {
	rev, err := k.kv.Create(ctx, k.key, k.value)
	if err != nil {
		return err
	}
	k.rev = rev
	return nil
}

// renew checks that the key is still this claim's, updates it against its
// revision, and returns the deadline until which the holder may serve: a
// TTL, less a margin for the server's clock running faster than this one,
// after the renewal was sent. It passes before the server can expire the
// key, so no one else can hold it while this holder serves. An error
// wrapping lease.ErrLost is final.
func (k *fencedKey) renew(ctx context.Context) (time.Time, error) {
	sent := k.clock.Now()
	if err := k.verify(ctx); err != nil {
		return time.Time{}, err
	}
	rev, err := k.kv.Update(ctx, k.key, k.value, k.rev)
	if err != nil {
		return time.Time{}, k.renewError(ctx, err)
	}
	k.rev = rev
	return sent.Add(k.ttl - k.ttl/50), nil
}

// verify checks that the key holds this claim's value at a revision it
// wrote; a later revision with its value is a renewal of its own whose ack
// was lost, and is taken up.
func (k *fencedKey) verify(ctx context.Context) error {
	e, err := k.kv.Get(ctx, k.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("%w: %s: its key is gone from bucket %s (expired, deleted, or the NATS store went back to before the claim)",
			lease.ErrLost, k.what, k.kv.Bucket())
	case err != nil:
		return k.renewError(ctx, err)
	case string(e.Value()) != string(k.value):
		return fmt.Errorf("%w: %s is %s's now (revision %d; this vendor's was %d): the NATS store went back and it was claimed again, or it expired and was claimed",
			lease.ErrLost, k.what, k.owner(e.Value()), e.Revision(), k.rev)
	case e.Revision() < k.rev:
		return fmt.Errorf("%w: %s: the NATS store went back: its key is at revision %d, below the %d this vendor wrote",
			lease.ErrLost, k.what, e.Revision(), k.rev)
	}
	k.rev = e.Revision()
	return nil
}

// renewError classifies a failed renewal: the key changed or gone, or its
// bucket gone, loses the hold; anything else may pass (a time-out, a
// JetStream leader election) and is retried.
func (k *fencedKey) renewError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("%w: %s expired or was taken (%s)", lease.ErrLost, k.what, jsText(err))
	case isBucketGone(ctx, err, k.kv, k.ttl):
		return fmt.Errorf("%w: bucket %s is gone (deleted, or the NATS store lost its JetStream state: %s)", lease.ErrLost, k.kv.Bucket(), jsText(err))
	}
	return fmt.Errorf("kv: renew %s: %w", k.what, err)
}

// isBucketGone reports whether b is gone, after a request to it failed
// with err. "No response from stream", or a time-out while a publish
// retries it, is also what a stream without a leader gives: the bucket is
// asked, with a context of its own, since the request's may have run out.
func isBucketGone(ctx context.Context, err error, b jetstream.KeyValue, ttl time.Duration) bool {
	if errors.Is(err, context.Canceled) {
		return false // the holder is stopping: no time to ask
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl/4)
	defer cancel()
	_, serr := b.Status(sctx)
	return bucketGone(serr)
}

// release deletes the key at the revision this claim wrote last, or at a
// later one that holds its value: a release cancels a renewal that may be
// in flight, whose write can land though its ack is lost.
func (k *fencedKey) release(ctx context.Context) error {
	err := k.kv.Delete(ctx, k.key, jetstream.LastRevision(k.rev))
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return err
	}
	e, gerr := k.kv.Get(ctx, k.key)
	if gerr != nil || string(e.Value()) != string(k.value) {
		return err // someone else's
	}
	return k.kv.Delete(ctx, k.key, jetstream.LastRevision(e.Revision()))
}
