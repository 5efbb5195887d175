package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/status"
)

// The HTTP attacks of issue 27 ("Hold under hostile load"), each against
// real vendor processes on loopback, their segments in a KV store on a
// NATS server of this process:
//
//   - TestAttackHTTPPipelinedReaders: 45 connections pipeline /metrics and
//     never read, past LEAF_HTTP_MAX_CONNS=40, while /healthz and /readyz
//     are probed on new connections: every probe must be answered.
//   - TestAttackHTTPReaders, on three vendors over 20,000 tags:
//     "stalled": 100 readers of /status.json?tags=all that never read.
//     The vendor's resident memory, sampled throughout, must stay bounded,
//     and no stalled write may outlive the attack.
//     "looping": four clients each loop on /status.json?tags=all, /metrics
//     and /cluster.json of another vendor. Its CPU must stay low, and
//     /cluster.json must not cost the vendors' stats traffic per reader.
//
// Each reports its figures before it checks them, so that an older vendor
// build (LEAF_E2E_VENDOR_BIN) yields the figures of what it does wrong.

// attackTags is how many tags the attacks on the status page run over:
// the size at which issue 27 was found.
const attackTags = 20_000

// manyTagVendors imports tags into a KV segment store on a NATS server of
// this process and starts n vendors on it (with env added).
func manyTagVendors(t *testing.T, prefix string, n, tags int, env ...string) (*natsCluster, []*vendor) {
	t.Helper()
	ns := startNATS(t)
	base := map[string]string{"LEAF_NATS_URL": ns.url()}
	importTags(t, base, tags)
	vendors := startVendors(t, prefix, n, with(base, env...))
	eventually(t, 60*time.Second, "the vendors to list every tag", func() bool {
		return vendorMetric(vendors, "leaf_segment_tags") >= float64(n*tags)
	})
	return ns, vendors
}

// allTags waits until v's /status.json?tags=all lists the store's rows,
// each tag's (the attack's answer: large), and returns its size.
func allTags(t testing.TB, v *vendor, tags int) int {
	t.Helper()
	var size, rows int
	ok := within(2*time.Minute, func() bool {
		_, body, err := fetch("http://"+v.httpAddr()+"/status.json?tags=all", time.Minute)
		var s status.Status
		if err != nil || json.Unmarshal([]byte(body), &s) != nil {
			return false
		}
		size, rows = len(body), len(s.Segments.Rows)
		return rows >= tags
	})
	if !ok {
		t.Fatalf("vendor %s's /status.json?tags=all lists %d rows, want %d", v.name, rows, tags)
	}
	return size
}

// pipeliners are connections that send requests back to back and never
// read an answer, each dialled again when the vendor closes it.
type pipeliners struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	blocked atomic.Int64 // connections whose writes blocked: the vendor stopped reading
	cut     atomic.Int64 // connections the vendor closed
	dials   atomic.Int64
}

// startPipeliners runs n pipelining connections to addr asking path, until
// stop or the test's end.
func startPipeliners(t testing.TB, addr, path string, n int) *pipeliners {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &pipeliners{cancel: cancel}
	t.Cleanup(p.stop)
	reqs := bytes.Repeat([]byte("GET "+path+" HTTP/1.1\r\nHost: leaf\r\n\r\n"), 64)
	for range n {
		p.wg.Go(func() {
			for ctx.Err() == nil {
				p.pipeline(ctx, addr, reqs)
			}
		})
	}
	return p
}

// pipeline writes reqs over one connection until the vendor closes it or
// ctx ends; it counts the first time a write blocks.
func (p *pipeliners) pipeline(ctx context.Context, addr string, reqs []byte) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	p.dials.Add(1)
	blocked := false
	for ctx.Err() == nil {
		c.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
		_, err := c.Write(reqs)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			if !blocked {
				blocked = true
				p.blocked.Add(1)
			}
		case err != nil:
			p.cut.Add(1)
			return
		}
	}
}

func (p *pipeliners) stop() {
	p.cancel()
	p.wg.Wait()
}

// probe GETs path on a new connection and says whether it answered 200.
func probe(url string) bool {
	code, _, err := fetch(url, 2*time.Second)
	return err == nil && code == http.StatusOK
}

// TestAttackHTTPPipelinedReaders is issue 27's first HTTP attack: more
// connections than LEAF_HTTP_MAX_CONNS pipeline /metrics and never read,
// so that every connection the vendor holds is busy with a request. A
// liveness probe that is refused restarts the vendor: /healthz and /readyz
// must answer every probe on a new connection.
func TestAttackHTTPPipelinedReaders(t *testing.T) {
	start := time.Now()
	const conns, maxConns, probes = 45, 40, 20
	ns := startNATS(t)
	v := startVendor(t, "p", map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_HTTP_MAX_CONNS": strconv.Itoa(maxConns)})
	base := "http://" + v.httpAddr()
	p := startPipeliners(t, v.httpAddr(), "/metrics", conns)
	// Every connection the vendor holds is busy once as many as its cap
	// are blocked; the others are refused or closed, and dial again.
	full := within(60*time.Second, func() bool { return p.blocked.Load() >= maxConns })
	// A probe counts as a kubelet's does: it restarts the vendor after
	// failureThreshold (3) failures in a row, so a probe refused once in a
	// dial storm and answered at the next try is no restart; the first
	// tries' answers are reported too.
	ok, first := map[string]int{}, map[string]int{}
	for range probes {
		for _, path := range []string{"/healthz", "/readyz"} {
			for try := 1; try <= 3; try++ {
				if probe(base + path) {
					ok[path]++
					if try == 1 {
						first[path]++
					}
					break
				}
			}
		}
	}
	p.stop()
	down := stopped(t, []*vendor{v})
	report(t, "attack HTTP pipelined readers: %d connections pipelining /metrics, never reading (LEAF_HTTP_MAX_CONNS=%d; %d blocked; "+
		"%d dials, %d closed by the vendor); probes on new connections: /healthz %d of %d ok (%d at the first try), /readyz %d of %d ok (%d); stopped=%d elapsed=%v",
		conns, maxConns, p.blocked.Load(), p.dials.Load(), p.cut.Load(), ok["/healthz"], probes, first["/healthz"], ok["/readyz"], probes, first["/readyz"],
		down, time.Since(start).Round(100*time.Millisecond))
	if !full {
		t.Errorf("only %d pipelining connections filled the vendor's buffers, fewer than the %d it holds", p.blocked.Load(), maxConns)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if ok[path] != probes {
			t.Errorf("%s answered %d of %d probes within 3 tries while the pipelining connections were held", path, ok[path], probes)
		}
	}
}

// stalledReader is a connection that asked for a page and reads nothing.
type stalledReader struct {
	c net.Conn
}

// stallReaders opens n connections to addr, each asking path once without
// Accept-Encoding (the uncompressed answer, the costlier one) and reading
// nothing, until the test ends.
func stallReaders(t testing.TB, addr, path string, n int) []stalledReader {
	t.Helper()
	out := make([]stalledReader, 0, n)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: leaf\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		out = append(out, stalledReader{c})
	}
	return out
}

// outcome reads what the vendor sent r (reading at last): "cut" when it
// closed the connection before the answer's end, else the answer's status
// code; "stalled" when it is still sending after timeout. It also says
// how many bytes it read.
func (r stalledReader) outcome(timeout time.Duration) (string, int64) {
	r.c.SetReadDeadline(time.Now().Add(timeout))
	cr := &countingReader{r: r.c}
	resp, err := http.ReadResponse(bufio.NewReader(cr), nil)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "stalled", cr.n
	case err != nil:
		return "cut", cr.n
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "stalled", cr.n
	case err != nil:
		return "cut", cr.n
	}
	return strconv.Itoa(resp.StatusCode), cr.n
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// outcomes reads every reader's outcome at once and counts them, and how
// many readers were sent more than the kernel held for them when reading
// began: writes the vendor still had under way after the attack.
func outcomes(t testing.TB, readers []stalledReader) (out map[string]int, pending int) {
	t.Helper()
	queued := socketQueues(t)
	var mu sync.Mutex
	var wg sync.WaitGroup
	out = map[string]int{}
	for _, r := range readers {
		local, remote := r.c.LocalAddr().(*net.TCPAddr).Port, r.c.RemoteAddr().(*net.TCPAddr).Port
		held := queued[[2]int{local, remote}].rx + queued[[2]int{remote, local}].tx
		wg.Go(func() {
			o, n := r.outcome(30 * time.Second)
			mu.Lock()
			defer mu.Unlock()
			out[o]++
			if n > held {
				pending++
			}
		})
	}
	wg.Wait()
	return out, pending
}

// queues are the bytes a socket's kernel holds: sent but not acknowledged
// or not sent yet (tx), received but not read (rx).
type queues struct{ tx, rx int64 }

// socketQueues reads the queues of every IPv4 TCP socket of this network
// namespace, by local and remote port.
func socketQueues(t testing.TB) map[[2]int]queues {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]int]queues{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// sl local_address rem_address st tx_queue:rx_queue ... (proc(5))
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		port := func(addr string) int {
			p, _ := strconv.ParseInt(addr[strings.IndexByte(addr, ':')+1:], 16, 32)
			return int(p)
		}
		tx, rx, _ := strings.Cut(f[4], ":")
		var q queues
		q.tx, _ = strconv.ParseInt(tx, 16, 64)
		q.rx, _ = strconv.ParseInt(rx, 16, 64)
		out[[2]int{port(f[1]), port(f[2])}] = q
	}
	return out
}

// procSampler records the most resident memory a process held, sampled
// every 50ms, and how the health probes it sends every 500ms fared.
type procSampler struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu                   sync.Mutex
	most                 float64
	healthOK, healthFail int
}

func sampleProc(t testing.TB, pid int, healthz string) *procSampler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &procSampler{cancel: cancel, most: residentOf(pid)}
	t.Cleanup(s.stop)
	s.wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			mb := residentOf(pid)
			ok := i%10 != 0 || probe(healthz)
			s.mu.Lock()
			s.most = max(s.most, mb)
			if i%10 == 0 && ok {
				s.healthOK++
			} else if i%10 == 0 {
				s.healthFail++
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	})
	return s
}

func (s *procSampler) stop() {
	s.cancel()
	s.wg.Wait()
}

func (s *procSampler) counts() (mostMB float64, healthOK, healthFail int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most, s.healthOK, s.healthFail
}

// residentOf reads process pid's resident memory (VmRSS) in MB, 0 when it
// cannot.
func residentOf(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuTime reads the CPU time process pid used so far (user and system).
func cpuTime(t testing.TB, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name, which may hold spaces: state is
	// the first, utime and stime the 12th and 13th (proc(5)), in ticks of
	// 1/100 s (USER_HZ).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// TestAttackHTTPReaders is issue 27's attacks on the status page of
// three vendors over 20,000 tags by readers that do not read, and by
// readers that loop; each attacks a vendor of its own.
func TestAttackHTTPReaders(t *testing.T) {
	ns, vendors := manyTagVendors(t, "r", 3, attackTags)
	t.Run("stalled", func(t *testing.T) { stalledReaders(t, vendors[0]) })
	t.Run("looping", func(t *testing.T) { loopingReaders(t, ns, vendors, vendors[1]) })
}

// stalledHold is how long the stalled readers hold on: longer than any
// wait a reader's turn may take (waitServed, then the computation's,
// shareMax) and the write deadline after (writeStall, 5 s).
const stalledHold = 30 * time.Second

// stalledReaders is issue 27's second HTTP attack: readers of
// /status.json?tags=all over 20,000 tags that never read, each of which
// cost a vendor 13-14 MB until its 60 s write time-out (100 of them took it
// to 1.4 GB). The vendor's resident memory must stay within 150 MB of what
// it was, /healthz must answer throughout, and when the attack ends no
// write may still be under way: each reader was cut, or had all of its
// answer in the kernel's buffers (a refusal, or an answer that fit).
func stalledReaders(t *testing.T, v *vendor) {
	start := time.Now()
	const readers, bound = 100, 150.0
	url := "http://" + v.httpAddr()
	size := allTags(t, v, attackTags)
	base := residentOf(v.pid())
	sampler := sampleProc(t, v.pid(), url+"/healthz")
	stalled := stallReaders(t, v.httpAddr(), "/status.json?tags=all", readers)
	time.Sleep(scaled(stalledHold)) // the attack's stated duration
	sampler.stop()
	most, healthOK, healthFail := sampler.counts()
	got, pending := outcomes(t, stalled)
	down := stopped(t, []*vendor{v})
	report(t, "attack HTTP stalled readers: %d readers of /status.json?tags=all (%d tags, %.1f MB uncompressed) reading nothing for %v; "+
		"vendor RSS %.0f MB before, at most %.0f MB (+%.0f); afterwards %s, %d writes still under way; /healthz %d ok %d failed; stopped=%d elapsed=%v",
		readers, attackTags, float64(size)/1e6, scaled(stalledHold), base, most, most-base, formatErrs(got), pending, healthOK, healthFail,
		down, time.Since(start).Round(100*time.Millisecond))
	if most-base > bound {
		t.Errorf("the vendor's resident memory grew by %.0f MB with %d stalled readers, more than %.0f MB", most-base, readers, bound)
	}
	if n := got["stalled"] + pending; n > 0 {
		t.Errorf("%d of %d writes to readers that read nothing were still under way after %v", n, readers, scaled(stalledHold))
	}
	if healthFail > 0 {
		t.Errorf("/healthz failed %d of %d times during the attack", healthFail, healthOK+healthFail)
	}
}

// loopers are clients that ask for a page again as soon as they have it
// (uncompressed: the costlier answer), counting the answers by code.
type loopers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	codes map[string]map[string]int // path -> code (or error) -> count
}

func startLoopers(t testing.TB, base string, n int, paths ...string) *loopers {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &loopers{cancel: cancel, codes: map[string]map[string]int{}}
	t.Cleanup(l.stop)
	for _, path := range paths {
		l.codes[path] = map[string]int{}
		for range n {
			l.wg.Go(func() {
				c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true}}
				defer c.CloseIdleConnections()
				for ctx.Err() == nil {
					if code := l.get(ctx, c, base+path); ctx.Err() == nil { // not cut by stop
						l.count(path, code)
					}
				}
			})
		}
	}
	return l
}

func (l *loopers) get(ctx context.Context, c *http.Client, url string) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return "error"
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return "error"
	}
	return strconv.Itoa(resp.StatusCode)
}

func (l *loopers) count(path, code string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.codes[path][code]++
}

func (l *loopers) stop() {
	l.cancel()
	l.wg.Wait()
}

func (l *loopers) answers(path string) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for code, n := range l.codes[path] {
		out[code] = n
	}
	return out
}

// statsTraffic counts the vendors' requests for each other's stats
// ($SRV.STATS.leaf, what /cluster.json gathers) and the bytes of the
// replies, seen by subscribers of this test.
type statsTraffic struct {
	subs []*nats.Subscription

	requests, replyBytes atomic.Int64
}

func watchStats(t testing.TB, nc *nats.Conn) *statsTraffic {
	t.Helper()
	s := &statsTraffic{}
	req, err := nc.Subscribe(status.StatsSubject, func(*nats.Msg) { s.requests.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	// The replies go to the asking vendor's inbox.
	rep, err := nc.Subscribe("_INBOX.>", func(m *nats.Msg) {
		if bytes.Contains(m.Data, []byte(`"io.nats.micro.v1.stats_response"`)) {
			s.replyBytes.Add(int64(len(m.Data)))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	s.subs = []*nats.Subscription{req, rep}
	t.Cleanup(s.stop)
	return s
}

func (s *statsTraffic) stop() {
	for _, sub := range s.subs {
		sub.Unsubscribe()
	}
}

// loopingReaders is issue 27's third HTTP attack: clients that ask again
// as soon as they have an answer, four on each expensive page of v, one of
// the vendors over 20,000 tags (four on /status.json?tags=all alone kept a
// vendor at 90% CPU; each /cluster.json cost 34-40 KB of NATS traffic).
// The vendor's CPU must stay under half a core, each page must still be
// served, and /cluster.json must gather the vendors' stats at most once
// for every two answers it gives.
func loopingReaders(t *testing.T, ns *natsCluster, vendors []*vendor, v *vendor) {
	start := time.Now()
	const clients, maxCPU = 4, 50.0
	paths := []string{"/status.json?tags=all", "/metrics", "/cluster.json"}
	if list := clusterTable([]*vendor{v}); len(list[0]) != len(vendors) {
		t.Fatalf("/cluster.json lists %q, want the %d vendors", list[0], len(vendors))
	}
	size := allTags(t, v, attackTags)
	stats := watchStats(t, ns.conn(t))
	cpu0, t0 := cpuTime(t, v.pid()), time.Now()
	l := startLoopers(t, "http://"+v.httpAddr(), clients, paths...)
	time.Sleep(scaled(10 * time.Second)) // the attack's stated duration
	l.stop()
	busy := float64(cpuTime(t, v.pid())-cpu0) / float64(time.Since(t0)) * 100
	stats.stop()
	gathers, replyBytes := stats.requests.Load(), stats.replyBytes.Load()
	answers := map[string]map[string]int{}
	for _, p := range paths {
		answers[p] = l.answers(p)
	}
	served := answers["/cluster.json"]["200"]
	perAnswer := float64(replyBytes) / float64(max(served, 1)) / 1024
	down := stopped(t, []*vendor{v})
	report(t, "attack HTTP looping readers: %d clients on each of %v of one of %d vendors (%d tags, %.1f MB of JSON) for %v: answers %v; "+
		"vendor CPU %.0f%% of a core; /cluster.json: %d stats gathers, %.0f KB of stats replies, %.1f KB per answer; stopped=%d elapsed=%v",
		clients, paths, len(vendors), attackTags, float64(size)/1e6, scaled(10*time.Second), answers, busy, gathers, float64(replyBytes)/1024, perAnswer,
		down, time.Since(start).Round(100*time.Millisecond))
	if busy > maxCPU {
		t.Errorf("looping readers kept the vendor at %.0f%% of a core, more than %.0f%%", busy, maxCPU)
	}
	for _, p := range paths {
		if answers[p]["200"] == 0 {
			t.Errorf("%s was never served under the loop: %v", p, answers[p])
		}
	}
	if 2*gathers > int64(served) {
		t.Errorf("/cluster.json gathered the vendors' stats %d times for %d answers: at most once for every two", gathers, served)
	}
}
