package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/workerid"
)

// ClockAgreedWait is how long a claim waits for a worker ID's last
// timestamp when this clock agrees with the NATS server's and the peers':
// the time an earlier holder's clock ran ahead, or its later epoch.
const ClockAgreedWait = 2 * time.Minute

// ClaimInputs is what a claim's settings rest on, as observed just before
// it.
type ClaimInputs struct {
	// Samples is how many other clocks were measured; Ahead how far any of
	// them is ahead of this one (CheckClocks).
	Samples int
	Ahead   time.Duration
	// Peers are the live vendors that answered; ContractTTL the longest
	// lease the contract records.
	Peers       []Peer
	ContractTTL time.Duration
}

// ClaimSettings returns the configuration of a claim from base and what
// was observed: the longest lease an earlier holder may hold (buckets
// created again after a loss wait that long), how long to wait for a last
// timestamp ahead of this clock, and how far ahead other clocks may be.
func ClaimSettings(base kv.LeaseConfig, in ClaimInputs) kv.LeaseConfig {
	lc := base
	lc.ClockAhead = in.Ahead
	lc.LongestLease = max(base.TTL, in.ContractTTL)
	for _, p := range in.Peers {
		lc.LongestLease = max(lc.LongestLease, p.Worker.LeaseTTL)
	}
	if in.Samples > 0 {
		// This clock agrees with the server's and the peers': a last
		// timestamp ahead of it is an earlier holder's clock having run
		// ahead, and waiting for it is safe.
		lc.MaxWait = ClockAgreedWait
	}
	return lc
}

// Claim claims a worker ID (workerid.Config.Claim): past the snowflake gate,
// after a check of this clock against the NATS server's and the live
// peers', in the bucket leaf_workers; then it checks that no live vendor
// holds the same ID (another JetStream, or a store that went back). Errors
// that waiting cannot fix are marked permanent. The holder it returns
// tells the Guard of each renewal and release, so that the others learn
// from it which worker ID this vendor holds.
func (g *Guard) Claim(ctx context.Context, r workerid.ClaimRequest) (workerid.Holder, error) {
	if err := g.SnowflakeErr(); err != nil {
		r.Report(err.Error(), time.Time{})
		return nil, err
	}
	samples, peers := g.sampleClocks(ctx)
	ahead, err := CheckClocks(samples, g.cfg.MaxSkew)
	if err != nil {
		r.Report(err.Error(), time.Time{})
		return nil, err
	}
	g.mu.Lock()
	in := ClaimInputs{Samples: len(samples), Ahead: ahead, Peers: peers, ContractTTL: g.core.ContractTTL()}
	g.mu.Unlock()
	lc := ClaimSettings(g.cfg.Lease, in)
	lc.IDs, lc.Report = &r.IDs, r.Report
	l, err := kv.Claim(ctx, g.cfg.JS, lc)
	if err != nil {
		return nil, claimError(err, r.IDs, samples)
	}
	if err := g.alone(ctx, l); err != nil {
		return nil, err
	}
	g.self.set(PeerWorker{ID: l.ID(), Held: true, Deadline: l.Deadline(), Where: l.Where(), LeaseTTL: l.TTL()})
	if l.TTL() != g.cfg.Lease.TTL {
		g.log.Warn("the lease TTL is the one bucket leaf_workers keeps, not LEAF_WORKER_LEASE_TTL; to change it: vendor cluster set-lease-ttl "+g.cfg.Lease.TTL.String(),
			"bucket_ttl", l.TTL(), "configured", g.cfg.Lease.TTL)
	}
	return &held{Lease: l, self: &g.self}, nil
}

// sampleClocks measures the NATS server's clock (the time stamp of a
// JetStream reply) and every live vendor's, and returns the vendors too.
func (g *Guard) sampleClocks(ctx context.Context) ([]ClockSample, []Peer) {
	var samples []ClockSample
	if offset, rtt, err := kv.ServerClock(ctx, g.cfg.JS, g.clock); err == nil {
		samples = append(samples, ClockSample{"the NATS server", offset, rtt})
	}
	replies, _, _ := g.askPeers(ctx, -1, peerGrace)
	var peers []Peer
	for _, r := range replies {
		samples = append(samples, PeerSample(r))
		peers = append(peers, r.Peer)
	}
	return samples, peers
}

// alone checks, once l is claimed, that no live vendor holds its worker ID
// too: within one JetStream no two can (a claim waits until every earlier
// holder's deadline has passed), so one that does is in another JetStream
// (the claim is given up: a setting to change), or got it from a store
// that went back (this vendor waits until that lease ends).
func (g *Guard) alone(ctx context.Context, l *kv.Lease) error {
	// A quarter of the lease at most: the first renewal waits for this.
	replies, _, _ := g.askPeers(ctx, l.ID(), max(peerGrace, min(aloneGrace, l.TTL()/4)))
	var peers []Peer
	for _, r := range replies {
		peers = append(peers, r.Peer)
	}
	conflict := VendingWith(peers, l.ID(), l.Where())
	if conflict == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// This claim vended nothing, but its start recorded its deadline as the
	// last timestamp: keep it. The other holder's IDs are below its own
	// deadline, before this one's, and what recorded them may be what the
	// store lost; the next claimant waits past them.
	l.Release(rctx, max(l.Last(), l.Deadline().UnixMilli()))
	if conflict.Same {
		return conflict // retried: the other holder's lease is gone from the bucket, and it gives the ID up
	}
	return lease.Permanent(conflict)
}

// claimError maps kv.Claim's errors: those that waiting cannot fix are
// marked permanent, with the setting to change.
func claimError(err error, ids workerid.Range, samples []ClockSample) error {
	switch {
	case errors.Is(err, kv.ErrHeldByLive):
		return lease.Permanent(fmt.Errorf("LEAF_WORKER_ID %d is held by another live worker (%s): pin another ID of LEAF_WORKER_ID_RANGE, or stop that worker",
			ids.First, strings.TrimPrefix(err.Error(), kv.ErrHeldByLive.Error()+": ")))
	case errors.Is(err, kv.ErrNoFreeWorkerID):
		return fmt.Errorf("%w; waiting for one (LEAF_WORKER_ID_RANGE is %s)", err, ids)
	case errors.Is(err, workerid.ErrClockBehind) && len(samples) > 0:
		return lease.Permanent(fmt.Errorf("%w; this host's clock agrees with %s, so an earlier holder's clock ran that far ahead (or it vended with a later LEAF_EPOCH): "+
			"waiting so long is not worth it; give this vendor worker IDs no one used lately (LEAF_WORKER_ID_RANGE, LEAF_WORKER_ID)",
			err, samples[0].Who))
	case errors.Is(err, kv.ErrCorrupt) && ids.Size() == 1,
		errors.Is(err, workerid.ErrClockBehind), errors.Is(err, kv.ErrReplicas),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return lease.Permanent(err)
	}
	return err
}

// held is a claimed lease that tells the Guard of each renewal and of its
// release, for what it answers the other vendors.
type held struct {
	*kv.Lease
	self *selfWorker
}

var _ workerid.Holder = (*held)(nil)

func (h *held) Renew(ctx context.Context, last int64) (time.Time, error) {
	deadline, err := h.Lease.Renew(ctx, last)
	h.self.renewed(deadline, err)
	return deadline, err
}

func (h *held) Release(ctx context.Context, last int64) error {
	h.self.released()
	return h.Lease.Release(ctx, last)
}
