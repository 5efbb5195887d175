package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// tally collects every ID a load received and every failure, by code.
type tally struct {
	name  string
	start time.Time

	mu      sync.Mutex
	ids     []int64
	runs    []ids.Range       // IDs from replies in the ranges encoding
	nRuns   int               // how many IDs runs hold
	ok      int               // replies with IDs
	errs    map[string]int    // "503", "timeout", "no responders", ...
	samples map[string]string // the first error message per code
	latest  map[string]string // the last error message per code
	bad     []string          // contract violations in replies
}

func newTally(name string) *tally {
	return &tally{name: name, start: time.Now(), errs: map[string]int{}, samples: map[string]string{}, latest: map[string]string{}}
}

// request sends one request and records what came back. It returns the
// IDs, or the error code ("" when IDs came back).
func (tl *tally) request(nc *nats.Conn, subject string, n int, timeout time.Duration) ([]int64, string) {
	msg, code := tl.send(nc, nats.NewMsg(subject), n, timeout)
	if code != "" {
		return nil, code
	}
	ids, err := vending.DecodeText(make([]int64, 0, n), msg.Data)
	switch {
	case err != nil:
		tl.violation("reply does not decode: %v", err)
		return nil, "bad reply"
	case len(ids) != n:
		tl.violation("asked for %d IDs, got %d", n, len(ids))
	case !slices.IsSorted(ids):
		tl.violation("IDs not ascending: %v ...", ids[:min(len(ids), 5)])
	}
	tl.mu.Lock()
	tl.ids = append(tl.ids, ids...)
	tl.ok++
	tl.mu.Unlock()
	return ids, ""
}

// requestRanges asks for n IDs in the ranges encoding and records the runs
// that came back, without writing out every ID. It returns the error code,
// "" when IDs came back.
func (tl *tally) requestRanges(nc *nats.Conn, subject string, n int, timeout time.Duration) string {
	req := nats.NewMsg(subject)
	req.Header.Set(vending.EncodingHeader, vending.EncodingRanges)
	msg, code := tl.send(nc, req, n, timeout)
	if code != "" {
		return code
	}
	rs, err := vending.DecodeRanges(nil, msg.Data)
	switch {
	case err != nil:
		tl.violation("ranges reply does not decode: %v", err)
		return "bad reply"
	case msg.Header.Get(vending.EncodingHeader) != vending.EncodingRanges:
		tl.violation("ranges reply without %s: %s", vending.EncodingHeader, vending.EncodingRanges)
	case ids.Count(rs) != int64(n):
		tl.violation("asked for %d IDs, got %d in %d runs", n, ids.Count(rs), len(rs))
	}
	tl.mu.Lock()
	tl.runs = append(tl.runs, rs...)
	tl.nRuns += int(ids.Count(rs))
	tl.ok++
	tl.mu.Unlock()
	return ""
}

// send sends req asking for n IDs and records a failure. It returns the
// reply, or the error code.
func (tl *tally) send(nc *nats.Conn, req *nats.Msg, n int, timeout time.Duration) (*nats.Msg, string) {
	req.Data = []byte(strconv.Itoa(n))
	msg, err := nc.RequestMsg(req, timeout)
	if err != nil {
		code := "transport"
		switch {
		case errors.Is(err, nats.ErrTimeout):
			code = "timeout"
		case errors.Is(err, nats.ErrNoResponders):
			code = "no responders"
		}
		tl.fail(code, err.Error())
		return nil, code
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		tl.fail(code, msg.Header.Get(micro.ErrorHeader))
		if text := msg.Header.Get(micro.ErrorHeader); string(msg.Data) != text {
			tl.violation("%s error reply's body %.60q is not its sentence %.60q", code, msg.Data, text)
		}
		return nil, code
	}
	return msg, ""
}

func (tl *tally) fail(code, msg string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.errs[code]++
	tl.latest[code] = msg
	if _, ok := tl.samples[code]; !ok {
		tl.samples[code] = msg
	}
}

func (tl *tally) violation(format string, a ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.bad) < 20 {
		tl.bad = append(tl.bad, fmt.Sprintf(format, a...))
	}
}

// counts returns the IDs and successful replies so far.
func (tl *tally) counts() (ids, ok int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.ids) + tl.nRuns, tl.ok
}

// errors returns how many requests failed with code.
func (tl *tally) errCount(code string) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.errs[code]
}

// sample returns an error message seen with code.
func (tl *tally) sample(code string) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.samples[code]
}

// last returns the last error message seen with code.
func (tl *tally) last(code string) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.latest[code]
}

// snapshotIDs returns a copy of the IDs so far.
func (tl *tally) snapshotIDs() []int64 {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.ids)
}

// waitOK waits until n more replies with IDs have come back.
func (tl *tally) waitOK(t testing.TB, n int, timeout time.Duration, what string) {
	t.Helper()
	_, base := tl.counts()
	eventually(t, timeout, fmt.Sprintf("%d more IDs replies on %s (%s)", n, tl.name, what), func() bool {
		_, ok := tl.counts()
		return ok >= base+n
	})
}

// waitIDs waits until the tally holds at least n IDs.
func (tl *tally) waitIDs(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%d IDs on %s", n, tl.name), func() bool {
		ids, _ := tl.counts()
		return ids >= n
	})
}

// check fails the test for duplicate or non-positive IDs and contract
// violations, then reports the summary line. More tallies may be merged in
// when their IDs share one space (the same subject on other vendors).
func (tl *tally) check(t testing.TB, more ...*tally) {
	t.Helper()
	all := []*tally{tl}
	all = append(all, more...)
	var runs []ids.Range
	errs := map[string]int{}
	ok := 0
	var bad []string
	for _, x := range all {
		x.mu.Lock()
		runs = slices.Grow(runs, len(x.ids)+len(x.runs))
		for _, id := range x.ids {
			runs = append(runs, ids.Range{First: id, Count: 1})
		}
		runs = append(runs, x.runs...)
		for k, n := range x.errs {
			errs[k] += n
		}
		ok += x.ok
		bad = append(bad, x.bad...)
		for code, msg := range x.samples {
			if code != "timeout" {
				t.Logf("%s: sample %s: %s", x.name, code, msg)
			}
		}
		x.mu.Unlock()
	}
	ids, dups, ndups, nonpos := overlaps(runs)
	for _, b := range bad {
		t.Errorf("%s: %s", tl.name, b)
	}
	if ndups > 0 {
		t.Errorf("%s: %d duplicate IDs, e.g. %s", tl.name, ndups, describe(dups))
	}
	if nonpos > 0 {
		t.Errorf("%s: %d IDs <= 0", tl.name, nonpos)
	}
	if ok == 0 {
		t.Errorf("%s: no request got IDs", tl.name)
	}
	report(t, "%s: ids=%d duplicates=%d nonpositive=%d replies=%d errors=%s violations=%d elapsed=%v",
		tl.name, ids, ndups, nonpos, ok, formatErrs(errs), len(bad), time.Since(tl.start).Round(100*time.Millisecond))
}

// overlaps counts the IDs runs hold, the IDs held more than once (with up
// to five examples) and the IDs <= 0. It sorts runs.
func overlaps(runs []ids.Range) (total int64, dups []int64, ndups, nonpos int64) {
	slices.SortFunc(runs, func(a, b ids.Range) int { return cmp.Compare(a.First, b.First) })
	last := int64(math.MinInt64) // the highest ID seen so far
	for _, r := range runs {
		total += r.Count
		if r.First <= 0 {
			nonpos += min(r.Count, -r.First+1)
		}
		if r.First <= last {
			n := min(r.Last(), last) - r.First + 1
			ndups += n
			if len(dups) < 5 {
				dups = append(dups, r.First)
			}
		}
		last = max(last, r.Last())
	}
	return total, dups, ndups, nonpos
}

// describe shows IDs with their snowflake parts, to tell which worker and
// millisecond repeated.
func describe(ids []int64) string {
	var parts []string
	for _, id := range ids {
		p, _ := snowflake.Decode(id, snowflake.DefaultEpoch)
		parts = append(parts, fmt.Sprintf("%d (as snowflake: %s worker %d seq %d)", id, p.Time().Format("15:04:05.000"), p.WorkerID, p.Sequence))
	}
	return strings.Join(parts, ", ")
}

func formatErrs(errs map[string]int) string {
	if len(errs) == 0 {
		return "{}"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(errs)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, errs[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// loadSpec describes a load: clients each sending requests for batch IDs
// to subject, one at a time, until stopped (or until limit IDs, if set).
type loadSpec struct {
	subject string
	batch   int
	ranges  bool // ask for the ranges encoding
	clients int
	timeout time.Duration // per request
	pace    time.Duration // pause after a failed request, to spare the CPU
}

// driver runs a load; stop ends it and waits for its clients.
type driver struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// startLoad starts spec's clients, recording into tl, on nc.
func startLoad(t testing.TB, nc *nats.Conn, tl *tally, spec loadSpec) *driver {
	t.Helper()
	if spec.pace == 0 {
		spec.pace = 5 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &driver{cancel: cancel}
	for range spec.clients {
		d.wg.Go(func() {
			for ctx.Err() == nil {
				var code string
				if spec.ranges {
					code = tl.requestRanges(nc, spec.subject, spec.batch, spec.timeout)
				} else {
					_, code = tl.request(nc, spec.subject, spec.batch, spec.timeout)
				}
				if code != "" {
					select {
					case <-ctx.Done():
					case <-time.After(spec.pace):
					}
				}
			}
		})
	}
	t.Cleanup(d.stop)
	return d
}

func (d *driver) stop() {
	d.once.Do(func() {
		d.cancel()
		d.wg.Wait()
	})
}

// startMixedLoad starts snowflake and segment (tag e2e) loads at once, each
// with its own tally named after scenario, and returns a stop for both.
func startMixedLoad(t testing.TB, nc *nats.Conn, scenario string, spec loadSpec) (sf, seg *tally, stop func()) {
	t.Helper()
	sf, seg = newTally(scenario+" snowflake"), newTally(scenario+" segment")
	spec.subject = "leaf.snowflake"
	d1 := startLoad(t, nc, sf, spec)
	spec.subject = "leaf.segment.e2e"
	d2 := startLoad(t, nc, seg, spec)
	return sf, seg, func() { d1.stop(); d2.stop() }
}
