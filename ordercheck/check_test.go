package ordercheck

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// play runs a script on a Checker from one goroutine: "a>" is client a's
// send, "a<5" its reply with ID 5, "a<5-9" with IDs 5 to 9. It returns
// the online result and the stamped requests.
func play(t *testing.T, script string) (Result, []Request) {
	t.Helper()
	c := NewChecker(time.Now())
	sent := map[string]Sent{}
	var reqs []Request
	for _, op := range strings.Fields(script) {
		client, arg, ok := strings.Cut(op, "<")
		if !ok {
			client = strings.TrimSuffix(op, ">")
			sent[client] = c.Send()
			continue
		}
		s, ok := sent[client]
		if !ok {
			t.Fatalf("%s: client %s receives before it sends", op, client)
		}
		delete(sent, client)
		lo, hi, _ := strings.Cut(arg, "-")
		if hi == "" {
			hi = lo
		}
		low, err1 := strconv.ParseInt(lo, 10, 64)
		high, err2 := strconv.ParseInt(hi, 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad op %q", op)
		}
		reqs = append(reqs, c.Receive(s, int(client[0]-'a'), low, high))
	}
	return c.Result(), reqs
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		violations   int64
		prior        int64 // the first example's Prior.High
	}{
		{"ordered", "a> a<1 b> b<2 a> a<3-5 b> b<6-6", 0, 0},
		{"overlapping: either order", "a> b> b<5 a<3", 0, 0},
		{"overlapping chain", "a> a<10 b> c> c<20 b<15", 0, 0},
		{"reply received before the send", "a> a<10 b> b<5", 1, 10},
		{"equal is not above", "a> a<7 b> b<7", 1, 7},
		{"batch reaching into a later one", "a> a<1-10 b> b<10-12", 1, 10},
		{"the highest prior reply counts", "a> a<10 b> b<20 c> c<15", 1, 20},
		{"each late reply once", "a> a<100 b> b<1 b> b<2 b> b<3", 3, 100},
		{"concurrent requests", "a> b> c> a<5 d> b<3 c<9 d<4 a> a<10", 1, 5},
		{"two vendors alternating", "a> a<1 a> a<11 a> a<2 a> a<12 a> a<3", 2, 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			online, reqs := play(t, tc.script)
			offline := Check(reqs)
			if online.Violations != tc.violations || offline.Violations != tc.violations {
				t.Fatalf("violations online %d, offline %d; want %d (%v)", online.Violations, offline.Violations, tc.violations, online.Examples)
			}
			if !reflect.DeepEqual(online, offline) {
				t.Fatalf("online %+v, offline %+v", online, offline)
			}
			if tc.violations > 0 && online.Examples[0].Prior.High != tc.prior {
				t.Fatalf("first example %v; want one after ID %d", online.Examples[0], tc.prior)
			}
			if online.Replies != int64(len(reqs)) {
				t.Fatalf("replies %d, want %d", online.Replies, len(reqs))
			}
		})
	}
}

func TestExamplesAreTheFirstReceived(t *testing.T) {
	script := "a> a<100"
	for range 2 * MaxExamples {
		script += " b> b<1"
	}
	res, _ := play(t, script)
	if res.Violations != 2*MaxExamples || len(res.Examples) != MaxExamples {
		t.Fatalf("%d violations, %d examples; want %d and %d", res.Violations, len(res.Examples), 2*MaxExamples, MaxExamples)
	}
	for i := 1; i < len(res.Examples); i++ {
		if res.Examples[i].Request.Received <= res.Examples[i-1].Request.Received {
			t.Fatalf("examples out of order: %v", res.Examples)
		}
	}
	if s := res.Examples[0].String(); !strings.Contains(s, "holds ID 1, not above ID 100 of worker 0's reply") {
		t.Fatalf("example reads %q", s)
	}
}

// FuzzOnlineOffline: whatever the interleaving of sends and replies, the
// offline check of the stamped requests finds what the Checker found.
func FuzzOnlineOffline(f *testing.F) {
	f.Add([]byte{3, 0, 1, 2, 9, 0, 4, 1, 200, 2, 7})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{8, 7, 6, 5, 4, 3, 2, 1, 0, 255, 254, 17, 33, 129})
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) == 0 {
			return
		}
		clients := 1 + int(script[0]%8)
		c := NewChecker(time.Now())
		sent := make([]*Sent, clients)
		var reqs []Request
		for _, b := range script[1:] {
			i := int(b) % clients
			if sent[i] == nil {
				s := c.Send()
				sent[i] = &s
				continue
			}
			low := int64(1 + b/16)
			reqs = append(reqs, c.Receive(*sent[i], i, low, low+int64(b%4)))
			sent[i] = nil
		}
		if online, offline := c.Result(), Check(reqs); !reflect.DeepEqual(online, offline) {
			t.Fatalf("online %+v, offline %+v", online, offline)
		}
	})
}

// concurrently runs workers goroutines of n requests each on one Checker;
// take gives each request its IDs between its send and its reply.
func concurrently(workers, n int, take func(r *rand.Rand) (low, high int64)) (Result, []Request) {
	c := NewChecker(time.Now())
	reqs := make([][]Request, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range n {
				s := c.Send()
				low, high := take(r)
				reqs[w] = append(reqs[w], c.Receive(s, w, low, high))
			}
		})
	}
	wg.Wait()
	var all []Request
	for _, rs := range reqs {
		all = append(all, rs...)
	}
	return c.Result(), all
}

// A shared atomic counter is linearizable: goroutines racing on the
// Checker find no violation in its IDs, and the offline check agrees.
func TestConcurrentCounterHasNoViolation(t *testing.T) {
	var next atomic.Int64
	online, reqs := concurrently(8, 5000, func(r *rand.Rand) (int64, int64) {
		n := 1 + r.Int64N(3)
		high := next.Add(n)
		return high - n + 1, high
	})
	if online.Violations != 0 || online.Replies != 8*5000 {
		t.Fatalf("online: %d violations in %d replies (%v); want none in 40000", online.Violations, online.Replies, online.Examples)
	}
	if offline := Check(reqs); !reflect.DeepEqual(online, offline) {
		t.Fatalf("online %+v, offline %+v", online, offline)
	}
}

// Two counters, like two vendors holding different segments of a normal
// tag: goroutines racing on the Checker find violations, and the offline
// check of the stamps finds the same ones.
func TestConcurrentTwoVendorsAgree(t *testing.T) {
	var vendors [2]atomic.Int64
	vendors[1].Store(1000)
	online, reqs := concurrently(8, 5000, func(r *rand.Rand) (int64, int64) {
		id := vendors[r.IntN(2)].Add(1)
		return id, id
	})
	if online.Violations == 0 {
		t.Fatal("no violation found between two counters")
	}
	if offline := Check(reqs); !reflect.DeepEqual(online, offline) {
		t.Fatalf("online %+v, offline %+v", online, offline)
	}
	t.Logf("%d violations in %d replies", online.Violations, online.Replies)
}

func BenchmarkChecker(b *testing.B) {
	c := NewChecker(time.Now())
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s := c.Send()
			id := next.Add(1)
			c.Receive(s, 0, id, id)
		}
	})
}
