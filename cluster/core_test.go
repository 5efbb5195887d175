package cluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/vending"
)

// These tests step the Core as the Guard does, with observations of their
// own: every case the contract handles, with no NATS, no store and no
// clock.

var (
	t0   = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	want = Terms{Epoch: 1288834974657, Layout: "1+41+10+12", WorkerIDs: "0-1023"}
)

const storeID = "aaa@1.2.3"

// world is what the stepped vendor sees; step feeds it to the core and
// carries out its writes as the Guard does.
type world struct {
	t        *testing.T
	core     *Core
	now      time.Time
	contract *kv.Contract
	rev      uint64
	corrupt  bool
	store    StoreReading
	peers    []Peer
	self     Holding
	writes   int
	logs     []string
}

func newWorld(t *testing.T) *world {
	return &world{t: t, core: NewCore(want, KindKV, "me/1", 30*time.Second), now: t0,
		store: StoreReading{Info: segment.StoreInfo{ID: storeID}}}
}

func (w *world) observe() Observation {
	o := Observation{Now: w.now, Store: w.store, Peers: w.peers, Self: w.self}
	switch {
	case w.corrupt:
		o.Contract = ContractReading{Rev: w.rev, Err: &kv.CorruptError{Bucket: kv.ClusterBucket, Key: "contract", Revision: w.rev, Why: "epoch 0"}}
	case w.contract == nil:
		o.Contract = ContractReading{Err: kv.ErrNoContract}
	default:
		o.Contract = ContractReading{Rec: *w.contract, Rev: w.rev}
	}
	return o
}

// step runs one check (Pass, as the Guard runs it): the decision that
// ends it, after any writes.
func (w *world) step() Decision {
	w.t.Helper()
	d := Pass(w.observe(), w.core.Step, w.write)
	for _, l := range d.Logs {
		w.logs = append(w.logs, l.Msg)
	}
	if d.Write != nil {
		w.t.Fatal("the core kept asking for writes")
	}
	return d
}

// write is the contract's bucket: a write at the wrong revision fails as
// compare-and-set does.
func (w *world) write(c kv.Contract, rev uint64) ContractReading {
	w.writes++
	if rev != w.rev && (w.contract != nil || w.corrupt) {
		return ContractReading{Err: errors.New("wrong last sequence"), Wrote: true}
	}
	w.contract, w.corrupt, w.rev = &c, false, w.rev+1
	return ContractReading{Rec: c, Rev: w.rev, Wrote: true}
}

func (w *world) peer(name string, terms Terms, worker int) Peer {
	p := Peer{V: 1, Instance: name, Now: w.now, Terms: terms}
	if worker >= 0 {
		p.Worker = PeerWorker{ID: worker, Held: true, Deadline: w.now.Add(20 * time.Second), Where: "leaf_workers@x", LeaseTTL: 30 * time.Second}
	}
	return p
}

func wantFatal(t *testing.T, d Decision, says ...string) {
	t.Helper()
	if d.Fatal == nil {
		t.Fatalf("no fatal error (note %q)", d.Note)
	}
	for _, s := range says {
		if !strings.Contains(d.Fatal.Error(), s) {
			t.Errorf("%v\ndoes not say %q", d.Fatal, s)
		}
	}
}

func TestFirstVendorRecordsTheContract(t *testing.T) {
	w := newWorld(t)
	if w.core.Snowflake() != ErrUnchecked || w.core.Segments() != ErrUnchecked {
		t.Fatal("gates open before a check")
	}
	d := w.step()
	if d.Fatal != nil || d.Note != "" || w.writes != 1 {
		t.Fatalf("first check: %+v after %d writes", d, w.writes)
	}
	if w.contract.Epoch != want.Epoch || w.contract.Segments != KindKV+":"+storeID || w.contract.By != "me/1" || w.contract.LeaseTTL != 30*time.Second {
		t.Fatalf("recorded %+v", w.contract)
	}
	if w.core.Snowflake() != nil || w.core.Segments() != nil {
		t.Fatalf("gates after the check: %v, %v", w.core.Snowflake(), w.core.Segments())
	}
	if len(w.logs) != 1 || w.logs[0] != "cluster contract recorded" {
		t.Fatalf("logs %q", w.logs)
	}
}

// Each term a vendor disagrees on ends it, naming both values and the
// setting to change.
func TestMismatchedTermsEndTheVendor(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*kv.Contract)
		says   []string
	}{
		{"epoch", func(c *kv.Contract) { c.Epoch = 1600000000000 },
			[]string{"epoch: the cluster's is 1600000000000, this vendor's 1288834974657; set LEAF_EPOCH=1600000000000"}},
		{"layout", func(c *kv.Contract) { c.Layout = "1+39+8+16" },
			[]string{"layout: the cluster's is 1+39+8+16, this vendor's 1+41+10+12", "cannot vend in the cluster's layout", "LEAF_SNOWFLAKE_LAYOUT"}},
		{"layout js53", func(c *kv.Contract) { c.Layout, c.WorkerIDs = "11+41+4+8", "0-15" },
			[]string{"layout: the cluster's is 11+41+4+8, this vendor's 1+41+10+12; set LEAF_SNOWFLAKE_LAYOUT=js53",
				"worker IDs: the cluster's is 0-15, this vendor's 0-1023; set LEAF_WORKER_ID_RANGE=0-15 (or unset it with the cluster's layout)"}},
		{"worker IDs", func(c *kv.Contract) { c.WorkerIDs = "0-511" },
			[]string{"worker IDs: the cluster's is 0-511, this vendor's 0-1023; set LEAF_WORKER_ID_RANGE=0-511"}},
		{"another segment store", func(c *kv.Contract) { c.Segments = KindPostgres + ":bbb@9.9.9" },
			[]string{"segment store: the cluster's is postgres:bbb@9.9.9, this vendor's jetstream-kv:" + storeID, "set LEAF_POSTGRES_URL to the cluster's database"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			rec := want.Contract(30*time.Second, "other/7", t0.Add(-time.Hour))
			rec.Segments = KindKV + ":" + storeID
			tc.change(&rec)
			w.contract, w.rev = &rec, 5
			d := w.step()
			wantFatal(t, d, append(tc.says, "recorded by other/7")...)
			var m *MismatchError
			if !errors.As(d.Fatal, &m) || m.Rerecorded {
				t.Fatalf("%T %+v", d.Fatal, m)
			}
		})
	}
}

// A js53 vendor meeting a cluster recorded in the default layout is refused
// too, and told to set LEAF_SNOWFLAKE_LAYOUT=default; it vends nothing.
func TestJS53VendorInADefaultCluster(t *testing.T) {
	w := newWorld(t)
	js53 := Terms{Epoch: want.Epoch, Layout: "11+41+4+8", WorkerIDs: "0-15"}
	w.core = NewCore(js53, KindKV, "me/1", 30*time.Second)
	rec := want.Contract(30*time.Second, "other/7", t0.Add(-time.Hour))
	w.contract, w.rev = &rec, 5
	d := w.step()
	wantFatal(t, d, "layout: the cluster's is 1+41+10+12, this vendor's 11+41+4+8; set LEAF_SNOWFLAKE_LAYOUT=default")
	if w.core.Snowflake() == nil || w.writes != 0 {
		t.Fatalf("snowflake gate %v after %d writes: a vendor of another layout must not vend or rewrite the contract", w.core.Snowflake(), w.writes)
	}
}

// A contract that does not name the segment store yet gets this vendor's.
func TestContractGetsTheSegmentStore(t *testing.T) {
	w := newWorld(t)
	rec := want.Contract(30*time.Second, "other/7", t0)
	w.contract, w.rev = &rec, 3
	if d := w.step(); d.Fatal != nil || w.writes != 1 || w.contract.Segments != KindKV+":"+storeID {
		t.Fatalf("%+v, %+v", d, w.contract)
	}
}

// The contract lost (a wiped NATS store) is recorded again by a vendor that
// checked it before, saying so; one recorded since by a vendor with other
// terms ends this one as "lost and recorded again".
func TestLostContract(t *testing.T) {
	w := newWorld(t)
	w.step()
	w.now = w.now.Add(CheckEvery)
	w.contract, w.rev = nil, 0
	if d := w.step(); d.Fatal != nil || w.contract == nil {
		t.Fatalf("lost contract: %+v", d)
	}
	if last := w.logs[len(w.logs)-1]; !strings.Contains(last, "recorded it again") {
		t.Fatalf("log %q", last)
	}

	w.now = w.now.Add(CheckEvery)
	other := want.Contract(30*time.Second, "misconfigured/9", w.now.Add(time.Second))
	other.Epoch = 1600000000000
	w.contract = &other
	w.now = w.now.Add(2 * time.Second)
	d := w.step()
	wantFatal(t, d, "was lost and recorded again by misconfigured/9", "epoch")
	var m *MismatchError
	if !errors.As(d.Fatal, &m) || !m.Rerecorded {
		t.Fatalf("not told as re-recorded: %v", d.Fatal)
	}
}

// A contract written over with garbage is replaced, at its revision, by
// this vendor's terms.
func TestCorruptContractIsRecordedAgain(t *testing.T) {
	w := newWorld(t)
	w.step()
	w.now = w.now.Add(CheckEvery)
	w.corrupt, w.rev = true, 9
	d := w.step()
	if d.Fatal != nil || w.corrupt || w.contract.Epoch != want.Epoch || w.rev != 10 {
		t.Fatalf("%+v, contract %+v rev %d", d, w.contract, w.rev)
	}
	if last := w.logs[len(w.logs)-1]; !strings.Contains(last, "corrupt") {
		t.Fatalf("log %q", last)
	}
	if w.core.Snowflake() != nil {
		t.Fatal("snowflake gate shut")
	}
}

// Wiped state with serving peers that vend by other terms: this vendor
// does not record its own; if they never record theirs here they are in
// another JetStream, and this vendor ends.
func TestMissingContractWithDisagreeingPeers(t *testing.T) {
	w := newWorld(t)
	other := want
	other.Epoch = 1600000000000
	w.peers = []Peer{w.peer("far/3", other, 7)}
	d := w.step()
	if d.Fatal != nil || w.writes != 0 || !strings.Contains(d.Note, "vends with epoch 1600000000000, this one with 1288834974657") {
		t.Fatalf("first check: %+v, %d writes", d, w.writes)
	}
	if w.core.Snowflake() != ErrUnchecked {
		t.Fatal("gate opened without a contract")
	}
	for w.now.Sub(t0) < OtherJetStreamAfter-CheckEvery {
		w.now = w.now.Add(CheckEvery)
		if d := w.step(); d.Fatal != nil {
			t.Fatalf("ended after %v: %v", w.now.Sub(t0), d.Fatal)
		}
	}
	w.now = w.now.Add(CheckEvery)
	wantFatal(t, w.step(), "keeps it in another JetStream", "far/3")
}

// A live vendor holding this vendor's worker ID shuts the snowflake gate:
// the message tells a store that went back (same bucket) from another
// JetStream.
func TestPeerOnTheSameWorkerID(t *testing.T) {
	w := newWorld(t)
	w.self = Holding{ID: 7, Held: true, Where: "leaf_workers@x"}
	w.peers = []Peer{w.peer("twin/2", want, 7)}
	w.step()
	if err := w.core.Snowflake(); err == nil || !strings.Contains(err.Error(), "went back") {
		t.Fatalf("same bucket: %v", err)
	}
	w.self.Where = "leaf_workers@y"
	w.now = w.now.Add(CheckEvery)
	w.step()
	if err := w.core.Snowflake(); err == nil || !strings.Contains(err.Error(), "another JetStream") || !errors.Is(err, ErrUnavailableForTest) {
		t.Fatalf("another JetStream: %v", err)
	}
	// Its deadline passed by its own clock: it vends no more.
	w.peers[0].Worker.Deadline = w.peers[0].Now.Add(-time.Millisecond)
	w.now = w.now.Add(CheckEvery)
	w.step()
	if err := w.core.Snowflake(); err != nil {
		t.Fatalf("after the peer's deadline: %v", err)
	}
}

// A live vendor serving the segment subjects from another store shuts the
// segment gate; one whose own gate is shut does not.
func TestPeerOnAnotherStore(t *testing.T) {
	w := newWorld(t)
	other := want
	other.Segments = KindKV + ":zzz@4.5.6"
	w.peers = []Peer{w.peer("p/1", other, -1)}
	w.step()
	if err := w.core.Segments(); err == nil || !strings.Contains(err.Error(), "serves the same segment subjects from jetstream-kv:zzz@4.5.6") {
		t.Fatalf("segments gate: %v", err)
	}
	w.peers[0].SegmentsRefused = true
	w.now = w.now.Add(CheckEvery)
	w.step()
	if err := w.core.Segments(); err != nil {
		t.Fatalf("a refusing peer shut the gate: %v", err)
	}
}

// The store this vendor vends from changing under it, or its KV bucket
// gone, ends it; a store refusing the credentials ends it before it served.
func TestStoreChanges(t *testing.T) {
	w := newWorld(t)
	w.step()
	w.store.Info.ID = "aaa@7.7.7" // a restored copy: same id, another place
	wantFatal(t, w.step(), "the segment store changed under this vendor", "restored from a backup")

	w = newWorld(t)
	w.step()
	w.store = StoreReading{Err: errors.New("no response"), Gone: true}
	wantFatal(t, w.step(), "is gone", "vendor cluster move-segments -lost")

	w = newWorld(t)
	w.store = StoreReading{Err: errors.New("password authentication failed"), Refused: true}
	wantFatal(t, w.step(), "password")

	// Unreachable: a note, the gates as they were.
	w = newWorld(t)
	w.step()
	w.store = StoreReading{Err: errors.New("timeout")}
	if d := w.step(); d.Fatal != nil || !strings.Contains(d.Note, "could not read the segment store's identity") || w.core.Segments() != nil {
		t.Fatalf("%+v, gate %v", d, w.core.Segments())
	}
}

// A store sealed for a move the contract does not name yet shuts the
// segment gate; once the contract names the new store, the vendor ends.
func TestMovedStore(t *testing.T) {
	w := newWorld(t)
	w.step()
	w.store.Info.MovedTo, w.store.Info.MovedAt = "postgres:new@1.1.1", t0
	w.now = w.now.Add(CheckEvery)
	w.step()
	if err := w.core.Segments(); !errors.Is(err, segment.ErrStoreMoved) {
		t.Fatalf("sealed store: %v", err)
	}
	w.contract.Segments = "postgres:new@1.1.1"
	w.now = w.now.Add(CheckEvery)
	wantFatal(t, w.step(), "were moved to postgres:new@1.1.1", "restart this vendor")
}

// Until a check completes the gates say why; a failed read of the contract
// keeps them so and notes why.
func TestUncheckedGates(t *testing.T) {
	w := newWorld(t)
	d := w.core.Step(Observation{Now: t0, Store: w.store, Contract: ContractReading{Err: errors.New("no responders")}})
	if d.Fatal != nil || !strings.Contains(d.Note, "could not read the cluster contract") || w.core.Snowflake() != ErrUnchecked {
		t.Fatalf("%+v", d)
	}
}

// ErrUnavailableForTest is the sentinel an Unsure matches: a 503.
var ErrUnavailableForTest = vendingUnavailable()

func TestUnsureIsA503(t *testing.T) {
	if !errors.Is(Unsure("x"), ErrUnavailableForTest) || !errors.Is(fmt.Errorf("w: %w", ErrUnchecked), ErrUnavailableForTest) {
		t.Fatal("Unsure is not vending.ErrUnavailable")
	}
}

func TestClaimSettings(t *testing.T) {
	base := kv.LeaseConfig{TTL: 30 * time.Second}
	lc := ClaimSettings(base, ClaimInputs{Samples: 2, Ahead: 80 * time.Millisecond, ContractTTL: 60 * time.Second,
		Peers: []Peer{{Worker: PeerWorker{LeaseTTL: 90 * time.Second}}}})
	if lc.LongestLease != 90*time.Second || lc.MaxWait != ClockAgreedWait || lc.ClockAhead != 80*time.Millisecond {
		t.Fatalf("%+v", lc)
	}
	lc = ClaimSettings(base, ClaimInputs{Ahead: ClockMargin})
	if lc.ClockAhead != ClockMargin || lc.MaxWait != 0 || lc.LongestLease != 30*time.Second {
		t.Fatalf("no clock measured: %+v", lc)
	}
}

func vendingUnavailable() error { return vending.ErrUnavailable }

// Vendors of other regions, which answer the same subjects across a
// supercluster's gateways, serve from stores of their own, claim worker IDs
// of their own and record contracts of their own: none of it shuts a gate.
// A vendor of another region with this region's number, or of this region
// with another number, shuts both: two regions with one number hand out
// the same IDs.
func TestPeersOfOtherRegions(t *testing.T) {
	regional := func(region, workers string) Terms {
		tm := want
		name, _, _ := strings.Cut(region, "/")
		tm.Region, tm.WorkerIDs, tm.Segments = region, workers, KindKV+":"+name
		return tm
	}
	w := newWorld(t)
	w.core = NewCore(regional("east/0", "0-127"), KindKV, "me/1", 30*time.Second)
	w.store = StoreReading{Info: segment.StoreInfo{ID: "east"}}
	w.peers = []Peer{w.peer("west/1", regional("west/1", "128-255"), 130)}
	if d := w.step(); d.Fatal != nil || d.Note != "" {
		t.Fatalf("first check: %+v", d)
	}
	if err := errors.Join(w.core.Snowflake(), w.core.Segments()); err != nil {
		t.Fatalf("a vendor of another region shut a gate: %v", err)
	}
	for _, tc := range []struct{ region, want string }{
		{"west/0", "region west has LEAF_REGION_ID 0, as this region east has"},
		{"east/1", "a region has one number"},
	} {
		w.peers = []Peer{w.peer("x/1", regional(tc.region, "128-255"), 130)}
		w.now = w.now.Add(CheckEvery)
		w.step()
		for _, gate := range []error{w.core.Snowflake(), w.core.Segments()} {
			if gate == nil || !strings.Contains(gate.Error(), tc.want) || !errors.Is(gate, vending.ErrUnavailable) {
				t.Fatalf("a vendor of region %s: gate %v, want a 503 saying %q", tc.region, gate, tc.want)
			}
		}
	}
}
