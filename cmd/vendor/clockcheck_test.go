package main

import (
	"strings"
	"testing"
	"time"
)

func TestReferenceIsTheMedianNearestThisClock(t *testing.T) {
	s := func(offs ...time.Duration) []clockSample {
		var out []clockSample
		for _, o := range offs {
			out = append(out, clockSample{offset: o})
		}
		return out
	}
	for _, tc := range []struct {
		samples []clockSample
		want    time.Duration
	}{
		{s(3 * time.Second), 3 * time.Second},
		{s(-time.Second, 0, 5*time.Second), 0},
		// Two: the server right, one peer wrong, or the other way round;
		// the one nearer this clock decides, so one wrong clock of two
		// cannot refuse a right one.
		{s(0, 10*time.Second), 0},
		{s(-10*time.Second, 100*time.Millisecond), 100 * time.Millisecond},
		{s(4*time.Second, 5*time.Second), 4 * time.Second},
	} {
		if got := reference(tc.samples); got != tc.want {
			t.Errorf("reference(%v) = %v, want %v", tc.samples, got, tc.want)
		}
	}
}

func TestCheckClocks(t *testing.T) {
	server := clockSample{"the NATS server", 300 * time.Millisecond, 2 * time.Millisecond}
	peer := clockSample{"vendor b/7", 2500 * time.Millisecond, 4 * time.Millisecond}
	if ahead, err := checkClocks(nil, time.Second); err != nil || ahead != clockMargin {
		t.Fatalf("no samples: %v, %v", ahead, err)
	}
	// Within the skew: how far the furthest clock is ahead, with margins.
	ahead, err := checkClocks([]clockSample{server}, time.Second)
	if err != nil || ahead != 300*time.Millisecond+time.Millisecond+clockMargin {
		t.Fatalf("one near clock: %v, %v", ahead, err)
	}
	// The median of the server and a peer is the nearer: within; the peer
	// 2.5s ahead is waited for after a lost store.
	if ahead, err := checkClocks([]clockSample{server, peer}, time.Second); err != nil || ahead != 2502*time.Millisecond+clockMargin {
		t.Fatalf("server and a peer ahead: %v, %v", ahead, err)
	}
	// Both 2.5s and more ahead: this clock is behind and refused, naming
	// each clock and the setting.
	far := clockSample{"the NATS server", 2600 * time.Millisecond, 2 * time.Millisecond}
	_, err = checkClocks([]clockSample{far, peer}, time.Second)
	if err == nil || !strings.Contains(err.Error(), "2.5s behind") || !strings.Contains(err.Error(), "vendor b/7 +2.5s") || !strings.Contains(err.Error(), "LEAF_CLOCK_MAX_SKEW") {
		t.Fatalf("a clock 2.5s behind both: %v", err)
	}
	if _, err := checkClocks([]clockSample{far, peer}, 0); err != nil {
		t.Fatalf("with the check off: %v", err)
	}
}

func TestMismatchNamesTheSettingToChange(t *testing.T) {
	rec := Config{Epoch: 1288834974657, WorkerIDRange: "0-1023"}.contract("postgres:aaa")
	for _, tc := range []struct {
		cfg      Config
		segments string
		want     []string
	}{
		{Config{Epoch: 1600000000000, WorkerIDRange: "0-1023"}, "postgres:aaa",
			[]string{"epoch: the cluster's is 1288834974657, this vendor's 1600000000000; set LEAF_EPOCH=1288834974657"}},
		{Config{Epoch: 1288834974657, WorkerIDRange: "0-511"}, "postgres:aaa",
			[]string{"worker IDs: the cluster's is 0-1023, this vendor's 0-511; set LEAF_WORKER_ID_RANGE=0-1023"}},
		{Config{Epoch: 1288834974657, WorkerIDRange: "0-1023"}, "jetstream-kv:bbb",
			[]string{"segment store: the cluster's is postgres:aaa, this vendor's jetstream-kv:bbb; set LEAF_POSTGRES_URL to the cluster's database"}},
		// While this vendor's store is not known yet, the store is no term.
		{Config{Epoch: 1288834974657, WorkerIDRange: "0-1023"}, "", nil},
	} {
		err := checkContract(rec, tc.cfg.contract(tc.segments), tc.cfg)
		if (err == nil) != (tc.want == nil) {
			t.Fatalf("%+v: %v", tc.cfg, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v\ndoes not say %q", err, w)
			}
		}
	}
}
