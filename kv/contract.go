package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ClusterBucket holds the cluster contract under one key. It keeps a few
// revisions, so `nats kv history leaf_cluster contract` shows who changed
// it and when.
const ClusterBucket = "leaf_cluster"

const contractKey = "contract"

// ErrNoContract is returned by Contracts.Get when none is recorded.
var ErrNoContract = errors.New("kv: no cluster contract recorded")

// Contract is what every vendor sharing a NATS cluster must agree on for IDs
// to be unique: the snowflake epoch and bit layout, the worker IDs the
// cluster may claim, and the segment store that serves the segment
// subjects. The first vendor records it; every vendor compares its own
// settings with it before it vends and while it runs.
type Contract struct {
	// Epoch is the snowflake epoch, Unix ms.
	Epoch int64 `json:"epoch"`
	// Layout is the snowflake bit layout (snowflake.Layout.String): unused,
	// time, worker and sequence bits, "1+41+10+12" or, for js53, "11+41+4+8".
	Layout string `json:"layout"`
	// WorkerIDs is the range of worker IDs this cluster claims, "0-1023".
	WorkerIDs string `json:"worker_ids"`
	// Segments names the segment store: its kind and identity,
	// "postgres:<id>" or "jetstream-kv:<id>" (segment.StoreInfo.ID).
	Segments string `json:"segments"`
	// Region is the cluster's region, "<name>/<id>" (LEAF_REGION,
	// LEAF_REGION_ID), "" for a cluster with no region: its IDs are its
	// region's blocks.
	Region string `json:"region,omitempty"`
	// LeaseTTL is the longest worker-ID lease a vendor of the cluster may
	// hold. It is not a term vendors must agree on (the bucket's TTL is the
	// one in force); a claim in buckets created again after they were lost
	// waits at least this long for earlier holders to stop.
	LeaseTTL time.Duration `json:"lease_ttl_ns,omitempty"`

	// By and At say who recorded this version and when; Why, for a change,
	// what it was for.
	By  string    `json:"by"`
	At  time.Time `json:"at"`
	Why string    `json:"why,omitempty"`
}

// Difference is one term on which two contracts differ.
type Difference struct {
	Term             string // "epoch", "layout", "worker IDs", "segment store"
	Recorded, Wanted string
}

// Diff lists the terms on which wanted differs from c, the recorded
// contract. Bookkeeping (By, At, Why) is not a term.
func (c Contract) Diff(wanted Contract) []Difference {
	var d []Difference
	add := func(term, rec, want string) {
		if rec != want {
			d = append(d, Difference{term, rec, want})
		}
	}
	add("epoch", fmt.Sprint(c.Epoch), fmt.Sprint(wanted.Epoch))
	add("layout", c.Layout, wanted.Layout)
	add("worker IDs", c.WorkerIDs, wanted.WorkerIDs)
	add("segment store", c.Segments, wanted.Segments)
	add("region", c.Region, wanted.Region)
	return d
}

// Contracts is the bucket of the cluster contract.
type Contracts struct {
	js       JS
	replicas int
	kv       jetstream.KeyValue
}

// OpenContracts opens the contract bucket, creating it with replicas copies
// when it is missing.
func OpenContracts(ctx context.Context, js JS, replicas int) (*Contracts, error) {
	cs := &Contracts{js: js, replicas: max(replicas, 1)}
	if err := cs.create(ctx); err != nil {
		return nil, err
	}
	return cs, nil
}

// FindContracts opens the contract bucket without creating it: ErrNoContract
// when it is missing.
func FindContracts(ctx context.Context, js JS) (*Contracts, error) {
	kv, err := js.KeyValue(ctx, js.Cluster)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, ErrNoContract
	}
	if err != nil {
		return nil, fmt.Errorf("kv: open bucket %s: %w", js.Cluster, err)
	}
	return &Contracts{js: js, replicas: 1, kv: kv}, nil
}

// ReadContract reads the contract recorded in js's cluster bucket, and
// creates nothing, not even a bucket that is gone: ErrNoContract when
// there is none. For a look at another region's contract (vendor cluster
// show), which must never write to that region's state.
func ReadContract(ctx context.Context, js JS) (Contract, error) {
	cs, err := FindContracts(ctx, js)
	if err != nil {
		return Contract{}, err
	}
	e, err := cs.kv.Get(ctx, contractKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Contract{}, ErrNoContract
	}
	if err != nil {
		return Contract{}, fmt.Errorf("kv: read the cluster contract in %s: %w", js.Cluster, err)
	}
	c, err := decodeContract(e.Value())
	if err != nil {
		return Contract{}, Corrupt(js.Cluster, contractKey, e.Revision(), e.Value(), err, "")
	}
	return c, nil
}

func (cs *Contracts) create(ctx context.Context) error {
	kv, err := openOrCreateSequenced(ctx, cs.js, jetstream.KeyValueConfig{
		Bucket:      cs.js.Cluster,
		Placement:   cs.js.Placement,
		Description: "leaf-nats cluster contract: epoch, layout, worker IDs, segment store",
		History:     10,
		Storage:     jetstream.FileStorage,
		Replicas:    cs.replicas,
	})
	if err != nil {
		return err
	}
	cs.kv = kv
	return nil
}

// Get returns the recorded contract and its revision, or ErrNoContract. A
// contract that cannot be believed is a *CorruptError, with its revision
// for a Replace. A bucket that is gone (deleted, or lost with the NATS store's JetStream
// state) is created again, empty: ErrNoContract, for the caller to record
// the contract anew.
func (cs *Contracts) Get(ctx context.Context) (Contract, uint64, error) {
	e, err := cs.kv.Get(ctx, contractKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Contract{}, 0, ErrNoContract
	}
	if err != nil {
		if _, serr := cs.kv.Status(ctx); bucketGone(serr) {
			if cerr := cs.create(ctx); cerr != nil {
				return Contract{}, 0, fmt.Errorf("kv: bucket %s is gone and could not be created again: %w", cs.js.Cluster, cerr)
			}
			return Contract{}, 0, ErrNoContract
		}
		return Contract{}, 0, fmt.Errorf("kv: read the cluster contract: %w", err)
	}
	c, err := decodeContract(e.Value())
	if err != nil {
		return Contract{}, e.Revision(), Corrupt(cs.js.Cluster, contractKey, e.Revision(), e.Value(), err,
			"A running vendor records the contract it vends by again; nats kv history "+cs.js.Cluster+" "+contractKey+" shows the versions before")
	}
	return c, e.Revision(), nil
}

// Record records c unless a contract is recorded already; either way it
// returns the contract in force and its revision.
func (cs *Contracts) Record(ctx context.Context, c Contract) (Contract, uint64, error) {
	v, err := json.Marshal(c)
	if err != nil {
		return Contract{}, 0, err
	}
	rev, err := cs.kv.Create(ctx, contractKey, v)
	switch {
	case err == nil:
		return c, rev, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return cs.Get(ctx)
	}
	return Contract{}, 0, fmt.Errorf("kv: record the cluster contract: %w", err)
}

// Replace records c in place of the contract at revision rev; it fails with
// jetstream.ErrKeyRevisionMismatch if someone changed it since.
func (cs *Contracts) Replace(ctx context.Context, c Contract, rev uint64) (uint64, error) {
	v, err := json.Marshal(c)
	if err != nil {
		return 0, err
	}
	rev, err = cs.kv.Update(ctx, contractKey, v, rev)
	if err != nil {
		return 0, fmt.Errorf("kv: change the cluster contract: %w", err)
	}
	return rev, nil
}
