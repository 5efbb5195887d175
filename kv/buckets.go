package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/snowflake"
)

// Buckets of the worker-ID leases.
const (
	// WorkersBucket holds one key per claimed worker ID; the bucket's TTL
	// expires the keys of workers that stopped renewing.
	WorkersBucket = "leaf_workers"
	// ClocksBucket holds each worker ID's last timestamp. It has no TTL: the
	// timestamp must outlive the lease so the next holder starts after it.
	ClocksBucket = "leaf_worker_clocks"
)

// workerBuckets opens both worker-ID buckets, creating them when missing,
// and returns them with the lease bucket's TTL (the one the server expires
// keys by).
func workerBuckets(ctx context.Context, js JS, c LeaseConfig) (leases, clocks jetstream.KeyValue, ttl time.Duration, err error) {
	leases, err = openOrCreateSequenced(ctx, js, jetstream.KeyValueConfig{
		Bucket: js.Workers, Description: "leaf-nats worker-ID leases",
		History: 1, TTL: c.TTL, Replicas: c.Replicas, Storage: jetstream.FileStorage, Placement: js.Placement,
	})
	if err != nil {
		return nil, nil, 0, err
	}
	clocks, err = openOrCreateSequenced(ctx, js, jetstream.KeyValueConfig{
		Bucket: js.Clocks, Description: "leaf-nats worker-ID last timestamps",
		History: 1, Replicas: c.Replicas, Storage: jetstream.FileStorage, Placement: js.Placement,
	})
	if err != nil {
		return nil, nil, 0, err
	}
	// A timestamp the server may drop would let the next holder repeat IDs.
	stream, err := js.Stream(ctx, streamOf(js.Clocks))
	if err != nil {
		return nil, nil, 0, fmt.Errorf("kv: stream of %s: %w", js.Clocks, err)
	}
	if sc := stream.CachedInfo().Config; sc.MaxAge > 0 || sc.MaxBytes > 0 || sc.MaxMsgs > 0 {
		return nil, nil, 0, fmt.Errorf("kv: bucket %s has a TTL or size limit (max age %v, bytes %d, messages %d), so worker IDs' "+
			"last timestamps could be dropped and IDs repeated; recreate it without limits",
			js.Clocks, sc.MaxAge, sc.MaxBytes, sc.MaxMsgs)
	}
	st, err := leases.Status(ctx)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("kv: status of %s: %w", js.Workers, err)
	}
	if ttl = st.TTL(); ttl <= 0 {
		return nil, nil, 0, fmt.Errorf("kv: bucket %s has no TTL, so dead workers' IDs would never be freed; delete it (nats kv del %s) and restart",
			js.Workers, js.Workers)
	}
	return leases, clocks, ttl, nil
}

// openOrCreate opens a bucket, creating it from cfg when it is missing.
func OpenOrCreate(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return open(ctx, js, cfg, func() (jetstream.KeyValue, error) { return js.CreateKeyValue(ctx, cfg) })
}

// openOrCreateSequenced is openOrCreate for a bucket whose revisions are
// held across calls for compare-and-set (leases and timestamps): it creates
// the bucket with revisions that start at the current Unix microsecond.
//
// A holder keeps its key's last revision for its next Update. If the bucket
// is lost (a NATS store wiped) and created again, its revisions start over,
// and an old holder's remembered revision could match a new holder's key by
// chance: its Update would succeed and two processes would vend with one
// worker ID. Revisions that start at the time of creation are above every
// revision of any earlier bucket, unless that one wrote more than a message
// per microsecond over its whole life, so a stale revision never matches.
func openOrCreateSequenced(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return open(ctx, js, cfg, func() (jetstream.KeyValue, error) {
		if _, err := js.CreateStream(ctx, kvStreamConfig(cfg, uint64(time.Now().UnixMicro()))); err != nil {
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				err = jetstream.ErrBucketExists
			}
			return nil, err
		}
		return js.KeyValue(ctx, cfg.Bucket)
	})
}

func open(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, create func() (jetstream.KeyValue, error)) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = create()
		if errors.Is(err, jetstream.ErrBucketExists) { // created by a concurrent process
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return kv, nil
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeReplicasNotSupported:
		return nil, fmt.Errorf("kv: create bucket %s with %d replicas: %w: this NATS server is not clustered and keeps one copy of each stream", cfg.Bucket, cfg.Replicas, ErrReplicas)
	case errors.As(err, &apiErr):
		return nil, fmt.Errorf("kv: open bucket %s: %s", cfg.Bucket, jsText(err))
	}
	return nil, fmt.Errorf("kv: open bucket %s: %w", cfg.Bucket, err)
}

// errCodeReplicasNotSupported is nats-server's JSStreamReplicasNotSupportedErr:
// a stream with more than one replica asked of a server with no cluster.
const errCodeReplicasNotSupported jetstream.ErrorCode = 10074

// ErrReplicas is returned when a bucket is to have more replicas than the
// NATS servers can keep: waiting cannot fix it.
var ErrReplicas = errors.New("more replicas than the NATS servers can keep")

// kvStreamConfig is the stream nats.go's CreateKeyValue makes for cfg
// (jetstream.prepareKeyValueConfig, which KeyValue binds to again), with a
// first sequence: KeyValueConfig has no field for it.
func kvStreamConfig(cfg jetstream.KeyValueConfig, firstSeq uint64) jetstream.StreamConfig {
	duplicates := 2 * time.Minute
	if cfg.TTL > 0 && cfg.TTL < duplicates {
		duplicates = cfg.TTL
	}
	return jetstream.StreamConfig{
		Name:              "KV_" + cfg.Bucket,
		Description:       cfg.Description,
		Subjects:          []string{"$KV." + cfg.Bucket + ".>"},
		MaxMsgsPerSubject: int64(max(cfg.History, 1)),
		MaxBytes:          -1,
		MaxAge:            cfg.TTL,
		MaxMsgSize:        -1,
		Storage:           cfg.Storage,
		Replicas:          max(cfg.Replicas, 1),
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        duplicates,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		AllowDirect:       true,
		Discard:           jetstream.DiscardNew,
		FirstSeq:          firstSeq,
	}
}

// KeysOf returns the keys of bucket that match filter (a subject pattern
// of keys, ">" for all), as the stream's subjects name them: a stream info
// request, answered by the stream's leader with no consumer and no meta
// leader. A deleted key may be among them (its delete marker): a get
// tells.
func KeysOf(ctx context.Context, js jetstream.JetStream, bucket, filter string) ([]string, error) {
	stream, err := js.Stream(ctx, streamOf(bucket))
	if err != nil {
		return nil, fmt.Errorf("kv: stream of bucket %s: %w", bucket, err)
	}
	prefix := "$KV." + bucket + "."
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+filter))
	if err != nil {
		return nil, fmt.Errorf("kv: keys of bucket %s: %w", bucket, err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subject := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subject, prefix))
	}
	slices.Sort(keys)
	return keys, nil
}

// bucketGone reports whether err says that a bucket's stream no longer
// exists (a deleted bucket, or a NATS store wiped): a publish to its
// subjects finds no stream to answer it.
func bucketGone(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrBucketNotFound)
}

// ServerClock measures how far the NATS server's clock is ahead of clock:
// the server time in a stream info reply of the cluster contract's bucket,
// less the middle of the round trip. rtt bounds the error of offset.
func ServerClock(ctx context.Context, js JS, clock snowflake.Clock) (offset, rtt time.Duration, err error) {
	if clock == nil {
		clock = snowflake.SystemClock{}
	}
	stream, err := js.Stream(ctx, streamOf(js.Cluster))
	if err != nil {
		return 0, 0, fmt.Errorf("kv: server clock: %w", err)
	}
	sent := clock.Now()
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("kv: server clock: %w", err)
	}
	rtt = clock.Now().Sub(sent)
	if info.TimeStamp.IsZero() {
		return 0, 0, errors.New("kv: server clock: the server sent no time stamp (nats-server 2.10 or later has it)")
	}
	return info.TimeStamp.Sub(sent.Add(rtt / 2)), rtt, nil
}

// jsText is err as a person reads it: a JetStream API error by its
// description, without nats.go's repeated "nats: " prefixes.
func jsText(err error) string {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return fmt.Sprintf("JetStream: %s (error %d)", apiErr.Description, apiErr.ErrorCode)
	}
	return strings.ReplaceAll(err.Error(), "nats: nats: ", "nats: ")
}
