package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/snowflake"
)

// Coming from Leaf (docs/migrating-from-leaf.md): Leaf's HTTP API under a
// flood, and Leaf's snowflake workers beside ours.

// leafHTTP takes IDs from Leaf's HTTP API into a tally, counting 503s
// (told to back off) and anything else that is not an ID.
type leafHTTP struct {
	client *http.Client
	tl     *tally
}

func (h leafHTTP) get(url string) {
	resp, err := h.client.Get(url)
	if err != nil {
		h.tl.fail("transport", err.Error())
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		h.tl.fail(strconv.Itoa(resp.StatusCode), string(b))
		return
	}
	id, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		h.tl.violation("200 with body %q", b)
		return
	}
	h.tl.mu.Lock()
	h.tl.ids = append(h.tl.ids, id)
	h.tl.ok++
	h.tl.mu.Unlock()
}

// TestLeafHTTPFlood: one vendor serves Leaf's HTTP API to a flood of
// clients (far more than its slots and queue) while NATS clients take
// IDs of the same tag and snowflake IDs with a one-second timeout. Every
// NATS request must be answered; HTTP requests get an ID or a 503 (never a
// 500 or a hang), and no ID repeats across HTTP and NATS.
func TestLeafHTTPFlood(t *testing.T) {
	ns := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_HTTP_LEAF_API": "true"}
	vendorCommand(t, env, "tags", "add", "order", "-step", "1000")
	v := startVendor(t, "leaf-api", env)
	base := "http://" + v.httpAddr()
	nc := ns.conn(t)

	const floodClients = 256
	transport := &http.Transport{MaxIdleConnsPerHost: floodClients, MaxConnsPerHost: floodClients}
	defer transport.CloseIdleConnections()
	httpSeg, httpSF := newTally("Leaf HTTP flood segment"), newTally("Leaf HTTP flood snowflake")
	ctx, cancel := context.WithTimeout(context.Background(), scaled(8*time.Second))
	defer cancel()
	var flood sync.WaitGroup
	for c := range floodClients {
		h := leafHTTP{client: &http.Client{Transport: transport, Timeout: 5 * time.Second}, tl: httpSeg}
		url := base + "/api/segment/get/order"
		if c%2 == 1 {
			h.tl, url = httpSF, base+"/api/snowflake/get/leaf-snowflake-test"
		}
		flood.Go(func() {
			for ctx.Err() == nil {
				h.get(url)
			}
		})
	}
	// NATS clients, one request at a time, with latencies.
	natsSeg, natsSF := newTally("Leaf HTTP flood: NATS segment"), newTally("Leaf HTTP flood: NATS snowflake")
	var (
		mu      sync.Mutex
		slowest time.Duration
		took    []time.Duration
	)
	var nw sync.WaitGroup
	for c := range 4 {
		tl, subject := natsSeg, "leaf.segment.order"
		if c%2 == 1 {
			tl, subject = natsSF, "leaf.snowflake"
		}
		nw.Go(func() {
			for ctx.Err() == nil {
				start := time.Now()
				if _, code := tl.request(nc, subject, 10, 3*time.Second); code != "" {
					continue
				}
				d := time.Since(start)
				mu.Lock()
				slowest = max(slowest, d)
				took = append(took, d)
				mu.Unlock()
			}
		})
	}
	nw.Wait()
	flood.Wait()

	_, natsOK := natsSeg.counts()
	_, natsSFOK := natsSF.counts()
	// Starved would be a NATS request with no answer in 3 s, or many told
	// to come back. A 503 can be fair on a loaded 2-core machine: a
	// segment load that took longer than the allocator waits.
	natsBusy := 0
	for _, tl := range []*tally{natsSeg, natsSF} {
		for code, n := range tl.errs {
			if code != "503" {
				t.Errorf("%s: %d NATS requests failed with %s during the HTTP flood: %s", tl.name, n, code, formatErrs(tl.errs))
			}
			natsBusy += n
		}
	}
	if natsBusy*20 > natsOK+natsSFOK {
		t.Errorf("%d NATS requests of %d told 503 during the HTTP flood: more than 5%%", natsBusy, natsBusy+natsOK+natsSFOK)
	}
	for _, tl := range []*tally{httpSeg, httpSF} {
		for code, n := range tl.errs {
			if code != "503" {
				t.Errorf("%s: %d answers %s during the flood, e.g. %s", tl.name, n, code, tl.samples[code])
			}
		}
	}
	httpSeg.check(t, natsSeg)
	httpSF.check(t, natsSF)
	slices.Sort(took)
	p99 := time.Duration(0)
	if len(took) > 0 {
		p99 = took[len(took)*99/100]
	}
	_, segOK := httpSeg.counts()
	_, sfOK := httpSF.counts()
	report(t, "Leaf HTTP flood: %d HTTP clients: %d IDs, %d told 503; NATS: %d segment and %d snowflake requests of 10 IDs, %d told 503, p99 %v, slowest %v",
		floodClients, segOK+sfOK, httpSeg.errCount("503")+httpSF.errCount("503"), natsOK, natsSFOK, natsBusy, p99.Round(time.Microsecond), slowest.Round(time.Microsecond))
	if natsOK == 0 || natsSFOK == 0 {
		t.Fatal("NATS requests were starved by the HTTP flood")
	}
}

// leafSnowflake is Leaf's SnowflakeIDGenImpl: 41 bits of milliseconds
// since Leaf's twepoch, 10 bits of worker ID, 12 bits of sequence that
// starts each millisecond at a random value below 100. A Leaf server gets
// its worker ID from a ZooKeeper sequential node, numbered 0, 1, 2, ... in
// the order the servers first registered.
type leafSnowflake struct {
	workerID int64
	mu       sync.Mutex
	last     int64
	seq      int64
}

func (g *leafSnowflake) next() (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := time.Now().UnixMilli()
	if ts < g.last {
		return 0, errors.New("clock moved back") // Leaf: Result(-1/-3, EXCEPTION)
	}
	if ts == g.last {
		g.seq = (g.seq + 1) & 4095
		if g.seq == 0 {
			g.seq = rand.Int64N(100)
			for ts <= g.last {
				ts = time.Now().UnixMilli()
			}
		}
	} else {
		g.seq = rand.Int64N(100)
	}
	g.last = ts
	return (ts-1288834974657)<<22 | g.workerID<<12 | g.seq, nil
}

// TestLeafSnowflakeSideBySide: four Leaf snowflake servers (worker IDs
// 0-3, as ZooKeeper numbers them) and two of our vendors with
// LEAF_WORKER_ID_RANGE=16-1023 vend at once; no ID repeats, our decoder
// reads Leaf's IDs, and the IDs of both sort together by time.
func TestLeafSnowflakeSideBySide(t *testing.T) {
	ns := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_WORKER_ID_RANGE": "16-1023"}
	vs := startVendors(t, "beside-leaf-", 2, env)
	nc := ns.conn(t)
	for _, v := range vs {
		if id := v.waitServing(); id < 16 {
			t.Fatalf("vendor %s claimed worker ID %d, outside LEAF_WORKER_ID_RANGE 16-1023", v.name, id)
		}
	}

	ours := newTally("Leaf snowflake side by side: Leaf and leaf-nats IDs together")
	leaf := newTally("Leaf snowflake side by side: Leaf workers 0-3")
	d := startLoad(t, nc, ours, loadSpec{subject: "leaf.snowflake", batch: 100, clients: 4, timeout: 3 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 4 {
		g := &leafSnowflake{workerID: int64(w)}
		wg.Go(func() {
			// Paced as a busy Leaf server behind HTTP is: bursts of 40 IDs
			// a millisecond, sequences and all, for as long as ours run.
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for ctx.Err() == nil {
				<-tick.C
				for range 40 {
					id, err := g.next()
					if err != nil {
						leaf.fail("clock", err.Error())
						continue
					}
					leaf.mu.Lock()
					leaf.ids = append(leaf.ids, id)
					leaf.ok++
					leaf.mu.Unlock()
				}
			}
		})
	}
	ours.waitIDs(t, scaled(500_000), 60*time.Second)
	leaf.waitIDs(t, scaled(200_000), 60*time.Second)
	cancel()
	wg.Wait()
	d.stop()
	ours.check(t, leaf)

	// Our decoder reads a Leaf ID, and Leaf's IDs and ours sort by time.
	leafIDs := leaf.snapshotIDs()
	sample := leafIDs[len(leafIDs)/2]
	msg, err := nc.Request("leaf.snowflake.decode", []byte(strconv.FormatInt(sample, 10)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var dec struct {
		TimestampMs int64 `json:"timestamp_ms"`
		WorkerID    int64 `json:"worker_id"`
		Sequence    int64 `json:"sequence"`
	}
	if err := json.Unmarshal(msg.Data, &dec); err != nil || dec.WorkerID > 3 ||
		dec.TimestampMs != sample>>22+1288834974657 || dec.Sequence != sample&4095 {
		t.Fatalf("leaf.snowflake.decode of Leaf's ID %d: %s (%v)", sample, msg.Data, err)
	}
	oursN := len(ours.snapshotIDs())
	g := &leafSnowflake{workerID: 3}
	prev := int64(0)
	for i := range 6 {
		var id int64
		if i%2 == 0 {
			ids, code := ours.request(nc, "leaf.snowflake", 1, 3*time.Second)
			if code != "" {
				t.Fatalf("snowflake request: %s", code)
			}
			id = ids[0]
		} else if id, err = g.next(); err != nil {
			t.Fatal(err)
		}
		p, err := snowflake.Decode(id, snowflake.DefaultEpoch)
		if err != nil {
			t.Fatal(err)
		}
		if id <= prev {
			t.Fatalf("ID %d (worker %d) made after %d sorts before it", id, p.WorkerID, prev)
		}
		prev = id
		// The next ID, from the other side, is made a millisecond later.
		eventually(t, time.Second, "the next millisecond", func() bool { return time.Now().UnixMilli() > p.UnixMilli })
	}
	report(t, "Leaf snowflake side by side: %d Leaf IDs (workers 0-3) and %d leaf-nats IDs (workers 16-1023), 0 duplicates, decoded and sorted together", len(leafIDs), oursN)
}
