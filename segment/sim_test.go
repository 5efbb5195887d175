package segment_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/segment"
)

// The simulation: vendors (real Allocators) taking IDs from one segment
// store, with the marks kept outside it, under a seeded schedule of faults:
// store and marks calls that fail, writes whose acks are lost, stores and
// marks that go back to earlier states (each row and the marks at a time of
// its own, so what they remember is reordered against each other), a clock
// that steps both ways, vendors that crash (losing their memory) and
// restart. Every ID handed out is checked against every other: one repeat
// fails the test with its seed and the steps that led to it.
//
// A step runs one action to its end: the store and marks answer at once,
// and the next step waits until no load is in flight, so a seed runs the
// same way every time.
//
// Two worlds: "postgres", whose marks are a store of their own (kv.Marks in
// a NATS bucket), and "kv", whose marks are the vendors' memories
// (cluster.PeerMarks): a vendor asks the live ones after it starts and
// after the store went back (a NATS server restored or restarted, which
// every vendor sees as a reconnect).
//
// What is not generated is the documented limit (docs/operations.md, "What
// cannot be repaired"): a tag whose store and every place that remembers
// how far it was handed out are behind at once. In "postgres" that is the
// store and the marks together; in "kv", the store and every live vendor's
// memory (the vendors that knew crashed). A fault that would make it so is
// skipped, and nothing else is.

// simSteps is the normal run's length; LEAF_SIM_STEPS changes it and
// LEAF_SIM_SEED runs one seed (both worlds); otherwise the fixed seeds run
// and a fresh one (testtool.SimSeeds).
const simSteps = 60_000

func TestSimulation(t *testing.T) {
	steps := simSteps
	if s := os.Getenv("LEAF_SIM_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("LEAF_SIM_STEPS=%q: %v", s, err)
		}
		steps = n
	}
	seeds := testtool.SimSeeds(t, []uint64{1, 2}, "go test -count=1 -run 'TestSimulation$' -v ./segment/")
	total := 0
	for _, world := range []string{"postgres", "kv"} {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", world, seed), func(t *testing.T) {
				s := newSim(t, world, seed)
				s.run(steps)
				t.Logf("%d steps: %s", steps, s.summary())
			})
			total += steps
		}
	}
	t.Logf("%d steps in all", total)
}

// A seed runs the same way every time.
func TestSimulationIsDeterministic(t *testing.T) {
	for _, world := range []string{"postgres", "kv"} {
		var runs []string
		for range 2 {
			s := newSim(t, world, 7)
			s.run(3000)
			runs = append(runs, s.summary()+"\n"+strings.Join(s.trace.lines(), "\n"))
		}
		if runs[0] != runs[1] {
			t.Fatalf("%s: seed 7 ran two ways:\n%s\n---\n%s", world, runs[0], runs[1])
		}
	}
}

const (
	simVendors = 3
	simLive    = 40 // store and marks states kept to go back to
)

var simTags = []string{"a", "b", "c"}

type sim struct {
	t     *testing.T
	world string
	seed  uint64
	rng   *rand.Rand
	now   time.Time
	store *simStore
	marks *simMarks // postgres only
	vs    [simVendors]*simVendor
	taken map[string]*idSet
	trace *ring
	n     simCounts
	stale []*segment.Allocator // crashed: closed at the end
}

type simCounts struct {
	steps, takes, ids, failed, crashes, restarts, rewinds, markRewinds, skipped, clockSteps, givenBack int
}

type simVendor struct {
	name  string
	a     *segment.Allocator
	up    bool
	mem   map[string]int64 // kv: how far this vendor handed each tag out
	sure  map[string]bool  // kv: asked the others since the store may have gone back
	marks segment.Marks
}

func newSim(t *testing.T, world string, seed uint64) *sim {
	s := &sim{
		t: t, world: world, seed: seed,
		rng:   rand.New(rand.NewPCG(seed, 0x1eaf)),
		now:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		taken: map[string]*idSet{},
		trace: &ring{},
	}
	s.store = &simStore{sim: s, rows: map[string]int64{}}
	for _, tag := range simTags {
		s.store.rows[tag] = 1
		s.taken[tag] = &idSet{}
	}
	if world == "postgres" {
		s.marks = &simMarks{sim: s, marks: map[string]int64{}}
	}
	for i := range s.vs {
		s.vs[i] = &simVendor{name: "v" + strconv.Itoa(i)}
		s.start(s.vs[i])
	}
	t.Cleanup(s.close)
	return s
}

func (s *sim) close() {
	for _, v := range s.vs {
		if v.up {
			s.stale = append(s.stale, v.a)
		}
	}
	for _, a := range s.stale {
		a.Close(context.Background())
	}
}

// clock is the allocators' clock: the simulation's.
func (s *sim) clock() time.Time {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	return s.now
}

func (s *sim) start(v *simVendor) {
	v.mem, v.sure = map[string]int64{}, map[string]bool{}
	v.marks = s.marks
	if s.world == "kv" {
		v.marks = &peerMarks{sim: s, v: v}
	}
	a, err := segment.Open(context.Background(), segment.Options{
		Store:  s.store,
		Marks:  v.marks,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:    s.clock,
		// No timer of the allocator's may fire, and no wait run out, in a
		// run: the simulation's time alone moves things.
		Refresh: 24 * time.Hour, Wait: time.Minute, LoadTimeout: time.Minute,
		MaxStep:  400,
		GiveBack: true,
	})
	if err != nil {
		s.t.Fatal(err)
	}
	v.a, v.up = a, true
}

func (s *sim) run(steps int) {
	for range steps {
		s.n.steps++
		s.step()
		s.quiesce()
	}
}

// step runs one action chosen by the seed.
func (s *sim) step() {
	s.store.mu.Lock()
	s.now = s.now.Add(time.Duration(s.rng.IntN(2000)) * time.Millisecond)
	s.store.mu.Unlock()
	v := s.vs[s.rng.IntN(simVendors)]
	switch p := s.rng.IntN(1000); {
	case p < 20:
		s.rewindStore()
	case p < 30 && s.marks != nil:
		s.rewindMarks()
	case p < 45:
		s.stepClock()
	case p < 60 && v.up:
		s.crash(v)
	case p < 65 && v.up:
		if s.world == "kv" && !s.safeWithout(v) {
			s.n.skipped++ // its memory goes as a crash's does
			return
		}
		s.trace.add("%s stops and starts again", v.name)
		v.a.Close(context.Background())
		s.start(v)
		s.n.restarts++
	case !v.up:
		s.trace.add("%s starts", v.name)
		s.start(v)
		s.n.restarts++
	default:
		s.take(v)
	}
}

func (s *sim) take(v *simVendor) {
	tag := simTags[s.rng.IntN(len(simTags))]
	n := int64(1 + s.rng.IntN(40))
	if s.rng.IntN(20) == 0 {
		n = 500 + s.rng.Int64N(1000) // above what a load brings
	}
	s.n.takes++
	rs, err := v.a.TakeRanges(context.Background(), tag, nil, n)
	if err != nil {
		s.n.failed++
		s.trace.add("%s takes %d of %s: %v", v.name, n, tag, err)
		return
	}
	s.trace.add("%s takes %d of %s: %v", v.name, n, tag, rs)
	for _, r := range rs {
		s.n.ids += int(r.Count)
		if dup, ok := s.taken[tag].add(r); !ok {
			s.fail("tag %s: ID %d handed out again (by %s, in %v)", tag, dup, v.name, r)
		}
	}
}

func (s *sim) fail(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d, world %s, step %d: %s\nreproduce: LEAF_SIM_SEED=%d LEAF_SIM_STEPS=%d go test -run 'TestSimulation$' -v ./segment/\nlast steps:\n%s",
		s.seed, s.world, s.n.steps, fmt.Sprintf(format, args...), s.seed, s.n.steps, strings.Join(s.trace.lines(), "\n"))
}

func (s *sim) crash(v *simVendor) {
	if s.world == "kv" && !s.safeWithout(v) {
		s.n.skipped++
		return
	}
	s.trace.add("%s crashes", v.name)
	s.stale = append(s.stale, v.a)
	v.up, v.a = false, nil
	s.n.crashes++
}

func (s *sim) stepClock() {
	d := time.Duration(s.rng.IntN(120_000)-90_000) * time.Millisecond
	s.store.mu.Lock()
	s.now = s.now.Add(d)
	s.store.mu.Unlock()
	s.trace.add("the clock steps %v", d)
	s.n.clockSteps++
}

// quiesce waits until no allocator has a load in flight: the step is over.
func (s *sim) quiesce() {
	for deadline := time.Now().Add(time.Minute); ; runtime.Gosched() {
		busy := false
		for _, v := range s.vs {
			if v.up {
				for _, st := range v.a.Snapshot() {
					busy = busy || st.Loading
				}
			}
		}
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			s.fail("a load still in flight after a minute")
		}
	}
}

// handedOut is, per tag, the end of everything that was or may yet be
// handed out: IDs taken, and the live vendors' buffers.
func (s *sim) handedOut() map[string]int64 {
	h := map[string]int64{}
	for tag, set := range s.taken {
		h[tag] = set.high()
	}
	for _, v := range s.vs {
		if !v.up {
			continue
		}
		for _, st := range v.a.Snapshot() {
			h[st.Tag] = max(h[st.Tag], st.Current.End)
			if st.NextReady {
				h[st.Tag] = max(h[st.Tag], st.Next.End)
			}
		}
	}
	return h
}

// remembered is, per tag, the most that somewhere besides the store knows
// was handed out, without is left out.
func (s *sim) remembered(without *simVendor) map[string]int64 {
	out := map[string]int64{}
	if s.marks != nil {
		maps.Copy(out, s.marks.marks)
		return out
	}
	for _, v := range s.vs {
		if v.up && v != without {
			for tag, m := range v.mem {
				out[tag] = max(out[tag], m)
			}
		}
	}
	return out
}

// safe reports whether rows (the store's, as they would be) and what is
// remembered elsewhere keep every tag at or above what was handed out.
func safe(rows, remembered, handed map[string]int64) bool {
	for tag, h := range handed {
		if rows[tag] < h && remembered[tag] < h {
			return false
		}
	}
	return true
}

func (s *sim) safeWithout(v *simVendor) bool {
	s.store.mu.Lock()
	rows := maps.Clone(s.store.rows)
	s.store.mu.Unlock()
	return safe(rows, s.remembered(v), s.handedOut())
}

// rewindStore puts each of a few rows back to a state of its own.
func (s *sim) rewindStore() {
	s.store.mu.Lock()
	rows := maps.Clone(s.store.rows)
	for _, tag := range simTags {
		if len(s.store.past) > 0 && s.rng.IntN(2) == 0 {
			rows[tag] = s.store.past[s.rng.IntN(len(s.store.past))][tag]
		}
	}
	s.store.mu.Unlock()
	if !safe(rows, s.remembered(nil), s.handedOut()) {
		s.n.skipped++
		return
	}
	s.store.mu.Lock()
	s.store.rows = rows
	s.store.mu.Unlock()
	s.trace.add("the store goes back to %v", rows)
	s.n.rewinds++
	for _, v := range s.vs {
		clear(v.sure) // kv: every vendor reconnects
	}
}

func (s *sim) rewindMarks() {
	m := s.marks
	if len(m.past) == 0 {
		return
	}
	marks := m.past[s.rng.IntN(len(m.past))]
	s.store.mu.Lock()
	rows := maps.Clone(s.store.rows)
	s.store.mu.Unlock()
	if !safe(rows, marks, s.handedOut()) {
		s.n.skipped++
		return
	}
	m.marks = maps.Clone(marks)
	s.trace.add("the marks go back to %v", marks)
	s.n.markRewinds++
}

func (s *sim) summary() string {
	n := s.n
	return fmt.Sprintf("%d takes (%d failed), %d IDs, %d crashes, %d restarts (%d tags given back), "+
		"%d store rewinds, %d marks rewinds, %d clock steps, %d faults skipped (the documented limit), 0 repeats",
		n.takes, n.failed, n.ids, n.crashes, n.restarts, n.givenBack, n.rewinds, n.markRewinds, n.clockSteps, n.skipped)
}

// fault is what the seed does to one store or marks call: nothing, fail it
// (nothing written), or lose its ack (written, but the caller is told it
// failed).
func (s *sim) fault() (fail, lostAck bool) {
	switch p := s.rng.IntN(100); {
	case p < 3:
		return true, false
	case p < 6:
		return false, true
	}
	return false, false
}

var errSimFault = errors.New("simulated store fault")

// simStore is a segment store whose rows are max_ids: Alloc runs its floor
// under the store's lock, as Postgres runs it under the row's.
type simStore struct {
	sim  *sim
	mu   sync.Mutex
	rows map[string]int64
	past []map[string]int64 // earlier states, most recent last
}

func (st *simStore) Alloc(ctx context.Context, tag string, step int64, floor segment.Floor) (segment.Row, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.sim
	fail, lostAck := s.fault()
	if fail {
		return segment.Row{}, errSimFault
	}
	maxID, ok := st.rows[tag]
	if !ok {
		return segment.Row{}, segment.ErrUnknownTag
	}
	step = cmp.Or(step, 10)
	if floor != nil {
		st.mu.Unlock() // the floor reads the marks, which take the lock too
		f, _, err := floor(maxID, step)
		st.mu.Lock()
		if err != nil {
			return segment.Row{}, err
		}
		maxID = f
	}
	st.rows[tag] = maxID + step
	st.past = append(st.past, maps.Clone(st.rows))
	if len(st.past) > simLive {
		st.past = st.past[1:]
	}
	if lostAck {
		return segment.Row{}, errSimFault
	}
	return segment.Row{Tag: tag, MaxID: maxID + step, Step: 10}, nil
}

// Return sets a row back at a clean stop (segment.Returner), with the
// store's faults.
func (st *simStore) Return(_ context.Context, tag string, from, to int64) (bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	fail, lostAck := st.sim.fault()
	if fail || st.rows[tag] != from {
		return false, nil
	}
	st.rows[tag] = to
	st.sim.n.givenBack++
	st.sim.trace.add("store: %s given back from %d to %d", tag, from, to)
	st.past = append(st.past, maps.Clone(st.rows))
	if len(st.past) > simLive {
		st.past = st.past[1:]
	}
	if lostAck {
		return false, errSimFault
	}
	return true, nil
}

func (st *simStore) Tags(context.Context) ([]segment.Row, error) {
	var rows []segment.Row
	for _, tag := range simTags {
		rows = append(rows, segment.Row{Tag: tag})
	}
	return rows, nil
}

func (st *simStore) Tag(_ context.Context, tag string) (segment.Row, error) {
	if !slices.Contains(simTags, tag) {
		return segment.Row{}, &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
	}
	return segment.Row{Tag: tag}, nil
}

// simMarks are marks kept in a store of their own (kv.Marks): Record only
// raises.
type simMarks struct {
	sim   *sim
	marks map[string]int64
	past  []map[string]int64
}

func (m *simMarks) Mark(_ context.Context, tag string) (int64, error) {
	m.sim.store.mu.Lock()
	defer m.sim.store.mu.Unlock()
	if fail, _ := m.sim.fault(); fail {
		return 0, errSimFault
	}
	return m.marks[tag], nil
}

func (m *simMarks) Record(_ context.Context, tag string, end int64) error {
	m.sim.store.mu.Lock()
	defer m.sim.store.mu.Unlock()
	fail, lostAck := m.sim.fault()
	if fail {
		return errSimFault
	}
	m.marks[tag] = max(m.marks[tag], end)
	m.past = append(m.past, maps.Clone(m.marks))
	if len(m.past) > simLive {
		m.past = m.past[1:]
	}
	if lostAck {
		return errSimFault
	}
	return nil
}

func (m *simMarks) Settle(string, int64, bool) {}

// Lower lowers a mark for IDs given back (segment.Lowerer), with the
// store's faults.
func (m *simMarks) Lower(_ context.Context, tag string, from, to int64) (bool, error) {
	m.sim.store.mu.Lock()
	defer m.sim.store.mu.Unlock()
	fail, lostAck := m.sim.fault()
	if fail || m.marks[tag] != from {
		return false, nil
	}
	m.marks[tag] = to
	m.past = append(m.past, maps.Clone(m.marks))
	if len(m.past) > simLive {
		m.past = m.past[1:]
	}
	if lostAck {
		return false, errSimFault
	}
	return true, nil
}

// peerMarks are a vendor's marks in the KV world (cluster.PeerMarks): its
// own memory, and the live vendors' when it cannot be sure the store is as
// it left it.
type peerMarks struct {
	sim *sim
	v   *simVendor
}

func (p *peerMarks) Mark(_ context.Context, tag string) (int64, error) {
	m := p.v.mem[tag]
	for _, v := range p.sim.vs {
		if v.up {
			m = max(m, v.mem[tag])
		}
	}
	p.v.sure[tag] = true
	p.v.mem[tag] = m
	return m, nil
}

// Lower lowers the vendor's own mark and tells the others, as
// cluster.PeerMarks does; one note in ten is lost.
func (p *peerMarks) Lower(_ context.Context, tag string, from, to int64) (bool, error) {
	if p.v.mem[tag] != from {
		return false, nil
	}
	p.v.mem[tag] = to
	if p.sim.rng.IntN(10) == 0 {
		return true, nil
	}
	for _, u := range p.sim.vs {
		if u != p.v && u.mem[tag] == from {
			u.mem[tag] = to
		}
	}
	return true, nil
}

// Record does nothing: the allocation is noted once settled (the sim's
// vendors answer no one while one of theirs is in flight).
func (p *peerMarks) Record(context.Context, string, int64) error { return nil }

func (p *peerMarks) Settle(tag string, end int64, committed bool) {
	if committed {
		p.v.mem[tag] = max(p.v.mem[tag], end)
	}
}

// idSet is a set of IDs kept as sorted, disjoint ranges.
type idSet struct{ rs []ids.Range }

// add adds r; false, with an ID already there, when r overlaps the set.
func (s *idSet) add(r ids.Range) (int64, bool) {
	end := r.First + r.Count
	i, _ := slices.BinarySearchFunc(s.rs, r.First, func(x ids.Range, first int64) int { return cmp.Compare(x.First, first) })
	if i > 0 && s.rs[i-1].First+s.rs[i-1].Count > r.First {
		return r.First, false
	}
	if i < len(s.rs) && s.rs[i].First < end {
		return s.rs[i].First, false
	}
	switch {
	case i > 0 && s.rs[i-1].First+s.rs[i-1].Count == r.First:
		s.rs[i-1].Count += r.Count
	default:
		s.rs = slices.Insert(s.rs, i, r)
		i++
	}
	// Join with the next range when they touch.
	if i < len(s.rs) && i > 0 && s.rs[i-1].First+s.rs[i-1].Count == s.rs[i].First {
		s.rs[i-1].Count += s.rs[i].Count
		s.rs = slices.Delete(s.rs, i, i+1)
	}
	return 0, true
}

// high is the end of the highest range, 0 when empty.
func (s *idSet) high() int64 {
	if len(s.rs) == 0 {
		return 0
	}
	last := s.rs[len(s.rs)-1]
	return last.First + last.Count
}

// ring keeps the last lines of a run's trace.
type ring struct {
	buf [200]string
	n   int
}

func (r *ring) add(format string, args ...any) {
	r.buf[r.n%len(r.buf)] = fmt.Sprintf(format, args...)
	r.n++
}

func (r *ring) lines() []string {
	var out []string
	for i := max(0, r.n-len(r.buf)); i < r.n; i++ {
		out = append(out, r.buf[i%len(r.buf)])
	}
	return out
}
