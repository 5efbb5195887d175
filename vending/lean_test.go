package vending_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/vending"
)

// strictTag is one strict tag "ledger" of a vendor: the leader serves it
// from memory (from next, shared by all), the others the slow way; each
// counts the requests it served.
type strictTag struct {
	next   *atomic.Int64
	leads  atomic.Bool
	served atomic.Int64
}

func (s *strictTag) take(dst []ids.Range, n int64) []ids.Range {
	s.served.Add(1)
	return append(dst, ids.Range{First: s.next.Add(n) - n + 1, Count: n})
}

func (s *strictTag) TryTakeRanges(_ string, dst []ids.Range, n int64) ([]ids.Range, bool, error) {
	if !s.leads.Load() {
		return dst, false, nil
	}
	return s.take(dst, n), true, nil
}

func (s *strictTag) TakeRanges(_ context.Context, _ string, dst []ids.Range, n int64) ([]ids.Range, error) {
	return s.take(dst, n), nil
}

func (*strictTag) IsStrict(string) bool                 { return true }
func (*strictTag) HandOff(string, vending.Handing) bool { return false }
func (s *strictTag) Leans(string) bool                  { return s.leads.Load() }

// A strict tag's leader takes most of the tag's requests itself (16 of the
// queue group's members are its), from the first it serves from memory
// until it no longer leads the tag; every ID is answered once, in the
// encoding asked for, and the leader's Close answers what it received.
func TestLeaderLeansTowardsItsTag(t *testing.T) {
	s := natstest.Server(t)
	next := &atomic.Int64{}
	tags := make([]*strictTag, 3)
	svcs := make([]*vending.Service, 3)
	for i := range tags {
		tags[i] = &strictTag{next: next}
		svc, err := vending.Open(natstest.Conn(t, s), vending.Config{Segments: tags[i]})
		if err != nil {
			t.Fatal(err)
		}
		svcs[i] = svc
		if i != 1 { // closed below
			t.Cleanup(func() { svc.Close(context.Background()) })
		}
	}
	leader := tags[0]
	leader.leads.Store(true)
	client := natstest.Conn(t, s)
	seen := map[int64]bool{}
	ask := func(n int) (share float64) {
		t.Helper()
		before := leader.served.Load()
		for i := range n {
			enc, want := vending.EncodingText, 1
			if i%2 == 1 {
				enc, want = vending.EncodingRanges, 3
			}
			msg := &nats.Msg{Subject: "leaf.segment.ledger", Header: nats.Header{vending.EncodingHeader: {enc}}, Data: []byte(strconv.Itoa(want))}
			r, err := client.RequestMsg(msg, 5*time.Second)
			if err != nil || r.Header.Get(micro.ErrorCodeHeader) != "" || r.Header.Get(vending.StrictHeader) != "true" {
				t.Fatalf("request %d: %v %v %q", i, err, r.Header, r.Data)
			}
			got := decodeAll(t, enc, r.Data)
			if len(got) != want {
				t.Fatalf("request %d for %d IDs: %v", i, want, got)
			}
			for _, id := range got {
				if seen[id] {
					t.Fatalf("ID %d answered twice", id)
				}
				seen[id] = true
			}
		}
		return float64(leader.served.Load()-before) / float64(n)
	}
	// Until the leader serves one from memory, it takes a third.
	for leader.served.Load() == 0 {
		ask(1)
	}
	time.Sleep(100 * time.Millisecond) // the lean's subscriptions reach the server
	if share := ask(300); share < 0.7 {
		t.Fatalf("the leader took %.0f%% of its strict tag's requests, want about %d/%d", 100*share, vending.LeanWeight+1, vending.LeanWeight+3)
	}
	leader.leads.Store(false)
	tags[1].leads.Store(true)
	ask(20) // the old leader stops leaning at the first it cannot serve
	time.Sleep(500 * time.Millisecond)
	if share := ask(300); share > 0.2 {
		t.Fatalf("the old leader still took %.0f%% of the tag's requests after it lost the lead", 100*share)
	}
	if share := float64(tags[1].served.Load()) / 300; share < 0.7 {
		t.Fatalf("the new leader took %.0f%% of the tag's requests", 100*share)
	}

	// A leader that closes answers every request its lean received.
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 200 {
		wg.Go(func() {
			if r, err := client.Request("leaf.segment.ledger", nil, 5*time.Second); err != nil || r.Header.Get(micro.ErrorCodeHeader) != "" {
				failed.Add(1)
			}
		})
	}
	svcs[1].Close(context.Background())
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of 200 requests failed while the leader closed", n)
	}
}

func decodeAll(t *testing.T, enc string, data []byte) []int64 {
	t.Helper()
	if enc != vending.EncodingRanges {
		out, err := vending.DecodeText(nil, data)
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		return out
	}
	rs, err := vending.DecodeRanges(nil, data)
	if err != nil {
		t.Fatalf("%q: %v", data, err)
	}
	var out []int64
	for _, r := range rs {
		for k := range r.Count {
			out = append(out, r.First+k)
		}
	}
	return out
}
