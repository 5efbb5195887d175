package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/pgtest"
	"github.com/leaf-nats/leaf/ordercheck"
	"github.com/leaf-nats/leaf/strict"
	"github.com/leaf-nats/leaf/vending"
)

// strictCall is one request of a strict tag as its client saw it.
type strictCall struct {
	sent, received time.Time
	runs           []ids.Range
}

// strictLog records the calls of many clients.
type strictLog struct {
	mu    sync.Mutex
	calls []strictCall
	errs  map[string]int
}

func (l *strictLog) add(c strictCall) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
}

func (l *strictLog) fail(what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs[what]++
}

// orderViolations counts the calls sent after another call's reply was
// received whose IDs are not all above that reply's (ordercheck.Check, on
// times counted from the first call's send).
func orderViolations(calls []strictCall) (violations int, example string) {
	var t0 time.Time // any origin on the monotonic clock: only the times' order counts
	if len(calls) > 0 {
		t0 = calls[0].sent
	}
	reqs := make([]ordercheck.Request, len(calls))
	for i, c := range calls {
		reqs[i] = ordercheck.Request{Sent: int64(c.sent.Sub(t0)), Received: int64(c.received.Sub(t0)),
			Low: c.runs[0].First, High: c.runs[len(c.runs)-1].Last()}
	}
	res := ordercheck.Check(reqs)
	if res.Violations > 0 {
		example = res.Examples[0].String()
	}
	return int(res.Violations), example
}

// strictLeader returns the PID of the vendor leading tag, 0 when none.
func strictLeader(ctx context.Context, js jetstream.JetStream, tag string) int {
	kv, err := js.KeyValue(ctx, "leaf_strict_leaders")
	if err != nil {
		return 0
	}
	e, err := kv.Get(ctx, tag)
	if err != nil {
		return 0
	}
	var v struct{ Holder string }
	if json.Unmarshal(e.Value(), &v) != nil {
		return 0
	}
	pid, _ := strconv.Atoi(v.Holder[strings.LastIndex(v.Holder, "/")+1:])
	return pid
}

func (v *vendor) pid() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cmd == nil || v.cmd.Process == nil {
		return 0
	}
	return v.cmd.Process.Pid
}

// TestStrictTagOrderUnderFaults: clients ask three vendors for a strict
// tag's IDs, in batches of 1 to 300, while the tag's leader is killed with
// SIGKILL, frozen with SIGSTOP past its lease, and NATS restarts under
// everyone. Every reply received before a request was sent holds only IDs
// below that request's, no ID repeats, and every fault is over within a
// few lease TTLs.
func TestStrictTagOrderUnderFaults(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	ns := startRestartableNATS(t)
	ttl := 2 * time.Second
	env := map[string]string{
		"LEAF_NATS_URL":         ns.url(),
		"LEAF_POSTGRES_URL":     pgtest.DSN(t),
		"LEAF_STRICT_LEASE_TTL": ttl.String(),
	}
	vendorCommand(t, env, "tags", "add", "ledger", "-strict", "-step", "1000")
	vendors := startVendors(t, "s", 3, env)
	js, err := jetstream.New(ns.conn(t))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	log := &strictLog{errs: map[string]int{}}
	var wg sync.WaitGroup
	for c := range 6 {
		nc := ns.conn(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(c), 3))
			for ctx.Err() == nil {
				n := 1 + r.IntN(300)
				req := &nats.Msg{Subject: "leaf.segment.ledger", Header: nats.Header{}, Data: []byte(strconv.Itoa(n))}
				req.Header.Set(vending.EncodingHeader, vending.EncodingRanges)
				sent := time.Now()
				msg, err := nc.RequestMsg(req, 2*time.Second)
				received := time.Now()
				switch {
				case errors.Is(err, nats.ErrNoResponders):
					log.fail("no responders")
					time.Sleep(20 * time.Millisecond)
				case err != nil:
					log.fail("timeout")
				case msg.Header.Get(micro.ErrorCodeHeader) != "":
					log.fail(msg.Header.Get(micro.ErrorCodeHeader))
					time.Sleep(5 * time.Millisecond)
				default:
					runs, err := vending.DecodeRanges(nil, msg.Data)
					if err != nil || ids.Count(runs) != int64(n) || msg.Header.Get(vending.StrictHeader) != "true" {
						log.fail("bad reply")
						continue
					}
					log.add(strictCall{sent, received, runs})
				}
			}
		}()
	}

	// Faults, each one after the tag served again: the leader killed and
	// restarted, the leader frozen past its lease, NATS restarted.
	served := func() int {
		log.mu.Lock()
		defer log.mu.Unlock()
		return len(log.calls)
	}
	// The vendors that do not lead hand the tag's requests to the leader
	// (a spy on the strict subject sees them, with the client's inbox).
	eventually(t, 60*time.Second, "the strict tag to serve", func() bool { return served() > 0 })
	spy, err := ns.conn(t).SubscribeSync("leaf.strict.ledger")
	if err != nil {
		t.Fatal(err)
	}
	handoffs := 0
	for deadline := time.Now().Add(20 * time.Second); handoffs == 0 && time.Now().Before(deadline); {
		if m, err := spy.NextMsg(time.Second); err == nil && m.Header.Get(strict.HandoffHeader) != "" && strings.HasPrefix(m.Reply, "_INBOX.") {
			handoffs++
		}
	}
	spy.Unsubscribe()
	if handoffs == 0 {
		t.Fatal("no request handed to the strict tag's leader in 20 s")
	}
	var recoveries []time.Duration
	faults := scaled(6)
	for i := range faults {
		eventually(t, 60*time.Second, "the strict tag to serve", func() bool { return served() > 0 })
		before := served()
		eventually(t, 60*time.Second, "more strict replies", func() bool { return served() > before+200 })
		pid := strictLeader(ctx, js, "ledger")
		leader := vendors[i%len(vendors)]
		for _, v := range vendors {
			if v.pid() == pid {
				leader = v
			}
		}
		at := time.Now()
		switch i % 3 {
		case 0:
			t.Logf("fault %d: kill -9 %s, the leader", i, leader.name)
			leader.kill()
			leader.start()
		case 1:
			t.Logf("fault %d: SIGSTOP %s, the leader, for %v", i, leader.name, ttl+time.Second)
			leader.signal(syscall.SIGSTOP)
			time.Sleep(ttl + time.Second)
			leader.signal(syscall.SIGCONT)
		case 2:
			t.Logf("fault %d: NATS restarts", i)
			ns.stop()
			time.Sleep(time.Second)
			ns.start(nil)
		}
		n := served()
		eventually(t, 60*time.Second, "the strict tag to serve after the fault", func() bool { return served() > n })
		recoveries = append(recoveries, time.Since(at))
	}
	time.Sleep(time.Second)
	cancel()
	wg.Wait()

	var runs []ids.Range
	for _, c := range log.calls {
		runs = append(runs, c.runs...)
	}
	violations, example := orderViolations(log.calls)
	ids, dupExamples, dups, _ := overlaps(runs)
	report(t, "strict tag under faults: %d replies, %d IDs, errors %v, %d order violations, %d repeated IDs; back to serving after each fault in %v (lease TTL %v)",
		len(log.calls), ids, log.errs, violations, dups, recoveries, ttl)
	if violations != 0 || dups != 0 {
		t.Fatalf("%d order violations (first: %s), %d repeated IDs (e.g. %v)", violations, example, dups, dupExamples)
	}
	if log.errs["bad reply"] != 0 {
		t.Fatalf("%d malformed or unmarked replies", log.errs["bad reply"])
	}
}

// The order checker finds a reply below one received before its request
// was sent, and lets overlapping requests be.
func TestOrderViolationsChecker(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	run := func(first, n int64) []ids.Range { return []ids.Range{{First: first, Count: n}} }
	ok := []strictCall{{at(0), at(2), run(1, 5)}, {at(1), at(5), run(7, 3)}, {at(3), at(4), run(6, 1)}}
	if v, _ := orderViolations(ok); v != 0 {
		t.Fatalf("in order: %d violations", v)
	}
	back := []strictCall{{at(0), at(2), run(10, 3)}, {at(3), at(4), run(6, 1)}}
	if v, _ := orderViolations(back); v != 1 {
		t.Fatalf("backwards: %d violations, want 1", v)
	}
}
