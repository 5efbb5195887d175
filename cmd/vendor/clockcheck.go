package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/snowflake"
)

// peerWait is how long a clock check waits for live vendors to answer.
const peerWait = 300 * time.Millisecond

// clockMargin is added to how far other clocks were measured ahead, for
// what a measurement cannot see.
const clockMargin = 50 * time.Millisecond

// clockSample is another clock's distance from this vendor's: positive when
// it is ahead. rtt bounds the error.
type clockSample struct {
	who         string
	offset, rtt time.Duration
}

func (s clockSample) String() string {
	sign := "+"
	if s.offset < 0 {
		sign = ""
	}
	return fmt.Sprintf("%s %s%v", s.who, sign, s.offset.Round(time.Millisecond))
}

// sampleClocks asks the NATS server (the time stamp of a JetStream stream
// info) and every live vendor but self ($SRV.STATS.leaf: the "now" of its
// status, taken from its snowflake clock) for their time. It returns the
// vendors' statuses too.
func sampleClocks(ctx context.Context, asker *peerAsker, js jetstream.JetStream, clock snowflake.Clock, self string) ([]clockSample, []status, error) {
	var samples []clockSample
	if offset, rtt, err := kv.ServerClock(ctx, js, clock); err == nil {
		samples = append(samples, clockSample{"the NATS server", offset, rtt})
	}
	replies, err := liveVendors(ctx, asker, clock, self)
	if errors.Is(err, errPeersDenied) {
		// The asker has said so: compare with the server's clock alone,
		// as when no other vendor runs.
		err = nil
	}
	var peers []status
	for _, r := range replies {
		rtt := r.arrived.Sub(r.sent)
		samples = append(samples, clockSample{"vendor " + r.st.Instance, r.st.Now.Sub(r.sent.Add(rtt / 2)), rtt})
		peers = append(peers, r.st)
	}
	return samples, peers, err
}

// peerReply is a live vendor's status, and when it was asked and answered
// by clock.
type peerReply struct {
	st            status
	sent, arrived time.Time
}

// liveVendors asks every live vendor but self for its status
// ($SRV.STATS.leaf), and gathers the replies that come within peerWait.
func liveVendors(ctx context.Context, peers *peerAsker, clock snowflake.Clock, self string) ([]peerReply, error) {
	var replies []peerReply
	err := peers.ask(ctx, peerWait, clock, func(data []byte, sent, arrived time.Time) {
		if st, ok := peerStatus(data); ok && st.Instance != self && !st.Now.IsZero() {
			replies = append(replies, peerReply{st, sent, arrived})
		}
	})
	return replies, err
}

// peerStatus reads a vendor's status out of its micro stats reply.
func peerStatus(data []byte) (status, bool) {
	var st micro.Stats
	if json.Unmarshal(data, &st) != nil {
		return status{}, false
	}
	for _, ep := range st.Endpoints {
		var s status
		if len(ep.Data) > 0 && json.Unmarshal(ep.Data, &s) == nil && s.Instance != "" {
			return s, true
		}
	}
	return status{}, false
}

// reference is the median offset of samples; of two middle ones, the one
// nearer this clock, so that one wrong clock among two cannot outvote it.
func reference(samples []clockSample) time.Duration {
	offs := make([]time.Duration, len(samples))
	for i, s := range samples {
		offs[i] = s.offset
	}
	slices.Sort(offs)
	n := len(offs)
	if n%2 == 1 {
		return offs[n/2]
	}
	a, b := offs[n/2-1], offs[n/2]
	if abs(a) < abs(b) {
		return a
	}
	return b
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// checkClocks is the check of a vendor's clock before it claims a worker
// ID, which Leaf's design describes and Leaf never shipped: against the
// median of the NATS server's clock and its live peers', it must be within
// maxSkew (0: no check). It returns how far any of those clocks is ahead of
// this one (with a margin), which is how long after a lost JetStream store a
// worker ID must be held before its IDs can be vended (kv.LeaseConfig.ClockAhead).
func checkClocks(samples []clockSample, maxSkew time.Duration) (ahead time.Duration, err error) {
	if len(samples) == 0 {
		return clockMargin, nil
	}
	ref := reference(samples)
	var rtt time.Duration
	for _, s := range samples {
		ahead = max(ahead, s.offset+s.rtt/2)
		rtt = max(rtt, s.rtt)
	}
	if maxSkew > 0 && abs(ref) > maxSkew+rtt/2 {
		dir := "behind"
		if ref < 0 {
			dir = "ahead of"
		}
		names := make([]string, len(samples))
		for i, s := range samples {
			names[i] = s.String()
		}
		return 0, fmt.Errorf("this host's clock is %v %s the median of the NATS server's and its live peers' (%s), more than LEAF_CLOCK_MAX_SKEW (%v): fix its clock (NTP); no worker ID is claimed until it agrees",
			abs(ref).Round(time.Millisecond), dir, strings.Join(names, ", "), maxSkew)
	}
	return max(ahead, 0) + clockMargin, nil
}
