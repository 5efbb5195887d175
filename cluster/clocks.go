package cluster

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// ClockMargin is added to how far other clocks were measured ahead, for
// what a measurement cannot see.
const ClockMargin = 50 * time.Millisecond

// ClockSample is another clock's distance from this vendor's: positive when
// it is ahead. RTT bounds the error.
type ClockSample struct {
	Who         string
	Offset, RTT time.Duration
}

func (s ClockSample) String() string {
	sign := "+"
	if s.Offset < 0 {
		sign = ""
	}
	return fmt.Sprintf("%s %s%v", s.Who, sign, s.Offset.Round(time.Millisecond))
}

// PeerSample is a peer's clock as its answer tells: its time, less the
// middle of the round trip.
func PeerSample(r Reply) ClockSample {
	rtt := r.Arrived.Sub(r.Sent)
	return ClockSample{"vendor " + r.Instance, r.Now.Sub(r.Sent.Add(rtt / 2)), rtt}
}

// Reference is the median offset of samples; of two middle ones, the one
// nearer this clock, so that one wrong clock among two cannot outvote it.
func Reference(samples []ClockSample) time.Duration {
	offs := make([]time.Duration, len(samples))
	for i, s := range samples {
		offs[i] = s.Offset
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

// CheckClocks is the check of a vendor's clock before it claims a worker
// ID, which Leaf's design describes and Leaf never shipped: against the
// median of the NATS server's clock and its live peers', it must be within
// maxSkew (0: no check). It returns how far any of those clocks is ahead of
// this one (with ClockMargin), which is how long after a lost JetStream
// store a worker ID must be held before its IDs can be vended
// (kv.LeaseConfig.ClockAhead).
func CheckClocks(samples []ClockSample, maxSkew time.Duration) (ahead time.Duration, err error) {
	if len(samples) == 0 {
		return ClockMargin, nil
	}
	ref := Reference(samples)
	var rtt time.Duration
	for _, s := range samples {
		ahead = max(ahead, s.Offset+s.RTT/2)
		rtt = max(rtt, s.RTT)
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
		return 0, fmt.Errorf("this host's clock is %v %s the median of the NATS server's and its live peers' (%s), more than "+
			"LEAF_CLOCK_MAX_SKEW (%v): fix its clock (NTP); no worker ID is claimed until it agrees",
			abs(ref).Round(time.Millisecond), dir, strings.Join(names, ", "), maxSkew)
	}
	return max(ahead, 0) + ClockMargin, nil
}
