package main

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/config"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/strict"
)

// strictTags is the strict side of a vendor's segments: the leads it holds,
// and the forwarder that carries the tags' requests between vendors.
type strictTags struct {
	*strict.Leaders
	fwd     *strict.Forwarder
	holders *kv.Leaders // the leaders bucket: who leads each tag
}

// Holder returns who leads tag, as the leaders bucket says ("" when no one
// does): with Status, the status page's status.Leaders.
func (st *strictTags) Holder(ctx context.Context, tag string) (string, error) {
	return st.holders.Holder(ctx, tag)
}

// Close steps down from every lead (releasing the leases, so that another
// vendor leads at once) and waits for the forwarded requests in flight.
func (st *strictTags) Close(ctx context.Context) error {
	return errors.Join(st.Leaders.Close(ctx), st.fwd.Close(ctx))
}

// openStrict serves the strict tags of alloc: leases in the leaders bucket
// of js, with deadlines on clock, requests forwarded to the leader over nc
// (the service's connection), which the lead is fenced on, and served past
// fc's gate.
func (v *vendor) openStrict(ctx context.Context, js kv.JS, fc strict.ForwarderConfig, clock snowflake.Clock) (*strictTags, error) {
	cfg, log, nc, alloc := v.cfg, v.log, v.svcConn, v.alloc
	var leaders *kv.Leaders
	if err := v.retry(ctx, "open the strict tags' leaders bucket", func() (err error) {
		leaders, err = kv.OpenLeaders(ctx, js, kv.LeadersConfig{TTL: cfg.StrictLeaseTTL, Replicas: cfg.KVReplicas, Holder: config.InstanceName(), Clock: clock})
		return err
	}); err != nil {
		return nil, err
	}
	if ttl := leaders.TTL(); ttl != cfg.StrictLeaseTTL {
		log.Warn("the leaders bucket has another TTL than LEAF_STRICT_LEASE_TTL: using the bucket's", "bucket_ttl", ttl, "configured", cfg.StrictLeaseTTL)
	}
	f, err := strict.OpenForwarder(nc, fc)
	if err != nil {
		return nil, err
	}
	sc := strict.Config{Source: alloc, Leases: leaders, Transport: f, Clock: lease.Timers(clock), Logger: log, Region: cfg.Region}
	if nc.ConnectedClusterName() == "" { // as the worker-ID keeper's fence
		sc.Fence = reconnects{nc}
	}
	ls, err := strict.Open(sc)
	if err != nil {
		return nil, errors.Join(err, f.Close(ctx))
	}
	return &strictTags{Leaders: ls, fwd: f, holders: leaders}, nil
}

// reconnects is the fence of leases held through a connection: its count
// of reconnects, to a server that may have lost every lease.
type reconnects struct{ nc *nats.Conn }

func (r reconnects) Fence() uint64 { return r.nc.Stats().Reconnects }
