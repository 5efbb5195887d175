package cluster

import (
	"strings"
	"testing"
	"time"
)

func TestReferenceIsTheMedianNearestThisClock(t *testing.T) {
	s := func(offs ...time.Duration) []ClockSample {
		var out []ClockSample
		for _, o := range offs {
			out = append(out, ClockSample{Offset: o})
		}
		return out
	}
	for _, tc := range []struct {
		samples []ClockSample
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
		if got := Reference(tc.samples); got != tc.want {
			t.Errorf("Reference(%v) = %v, want %v", tc.samples, got, tc.want)
		}
	}
}

func TestCheckClocks(t *testing.T) {
	server := ClockSample{Who: "the NATS server", Offset: 300 * time.Millisecond, RTT: 2 * time.Millisecond}
	peer := ClockSample{Who: "vendor b/7", Offset: 2500 * time.Millisecond, RTT: 4 * time.Millisecond}
	if ahead, err := CheckClocks(nil, time.Second); err != nil || ahead != ClockMargin {
		t.Fatalf("no samples: %v, %v", ahead, err)
	}
	// Within the skew: how far the furthest clock is ahead, with margins.
	ahead, err := CheckClocks([]ClockSample{server}, time.Second)
	if err != nil || ahead != 300*time.Millisecond+time.Millisecond+ClockMargin {
		t.Fatalf("one near clock: %v, %v", ahead, err)
	}
	// The median of the server and a peer is the nearer: within; the peer
	// 2.5s ahead is waited for after a lost store.
	if ahead, err := CheckClocks([]ClockSample{server, peer}, time.Second); err != nil || ahead != 2502*time.Millisecond+ClockMargin {
		t.Fatalf("server and a peer ahead: %v, %v", ahead, err)
	}
	// Both 2.5s and more ahead: this clock is behind and refused, naming
	// each clock and the setting.
	far := ClockSample{Who: "the NATS server", Offset: 2600 * time.Millisecond, RTT: 2 * time.Millisecond}
	_, err = CheckClocks([]ClockSample{far, peer}, time.Second)
	if err == nil || !strings.Contains(err.Error(), "2.5s behind") || !strings.Contains(err.Error(), "vendor b/7 +2.5s") || !strings.Contains(err.Error(), "LEAF_CLOCK_MAX_SKEW") {
		t.Fatalf("a clock 2.5s behind both: %v", err)
	}
	if _, err := CheckClocks([]ClockSample{far, peer}, 0); err != nil {
		t.Fatalf("with the check off: %v", err)
	}
}

func TestMismatchNamesTheSettingToChange(t *testing.T) {
	rec := Terms{Epoch: 1288834974657, Layout: "1+41+10+12", WorkerIDs: "0-1023", Segments: "postgres:aaa"}.Contract(0, "", time.Time{})
	terms := func(epoch int64, ids, segments string) Terms {
		return Terms{Epoch: epoch, Layout: "1+41+10+12", WorkerIDs: ids, Segments: segments}
	}
	for _, tc := range []struct {
		want Terms
		says []string
	}{
		{terms(1600000000000, "0-1023", "postgres:aaa"),
			[]string{"epoch: the cluster's is 1288834974657, this vendor's 1600000000000; set LEAF_EPOCH=1288834974657"}},
		{terms(1288834974657, "0-511", "postgres:aaa"),
			[]string{"worker IDs: the cluster's is 0-1023, this vendor's 0-511; set LEAF_WORKER_ID_RANGE=0-1023"}},
		{terms(1288834974657, "0-1023", "jetstream-kv:bbb"),
			[]string{"segment store: the cluster's is postgres:aaa, this vendor's jetstream-kv:bbb; set LEAF_POSTGRES_URL to the cluster's database"}},
		// While this vendor's store is not known yet, the store is no term.
		{terms(1288834974657, "0-1023", ""), nil},
	} {
		err := Check(rec, tc.want)
		if (err == nil) != (tc.says == nil) {
			t.Fatalf("%+v: %v", tc.want, err)
		}
		for _, w := range tc.says {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v\ndoes not say %q", err, w)
			}
		}
	}
}
