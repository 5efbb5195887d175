package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/vending"
)

// OtherJetStreamAfter is how long a vendor waits for a serving peer with
// other terms to record a missing contract before it concludes that the
// peer keeps its contract in another JetStream: long enough for a peer's
// guard to check a few times.
const OtherJetStreamAfter = 3 * CheckEvery

// Core decides, from what a vendor observed of the cluster, whether it may
// vend: the recorded contract, its segment store's identity and the live
// vendors it can see. It does no I/O and reads no clock, as etcd's raft
// does not: the Guard gathers an Observation, steps the Core with it, and
// carries out the Decision (a contract to write, a process to end, lines to
// log). Tests step it through every case with observations of their own.
type Core struct {
	want     Terms         // what this vendor vends by; Segments "" until its store answers
	kind     string        // KindPostgres or KindKV: this vendor's store
	self     string        // this vendor's instance name
	leaseTTL time.Duration // this vendor's configured lease TTL, recorded with the contract

	checked       time.Time // when a check last completed; zero before
	disagreeSince time.Time // when a missing contract met a serving peer with other terms
	contractTTL   time.Duration
	pending       writeKind // what the write in progress is for

	snowflake, segments error // the gates: why each kind of request is refused, nil: it is not
}

// NewCore returns the core of a vendor that vends by want from a store of
// kind, named self, with leases of leaseTTL. Both gates stay shut until a
// check completes.
func NewCore(want Terms, kind, self string, leaseTTL time.Duration) *Core {
	return &Core{want: want, kind: kind, self: self, leaseTTL: leaseTTL, snowflake: ErrUnchecked, segments: ErrUnchecked}
}

// Unsure is the refusal of a vendor that cannot be sure its IDs are unique:
// the service answers it with a 503.
type Unsure string

func (u Unsure) Error() string      { return string(u) }
func (Unsure) Is(target error) bool { return target == vending.ErrUnavailable }

// ErrUnchecked is both gates' answer until a check has completed.
var ErrUnchecked error = Unsure("not yet checked against the cluster contract")

// Observation is what one check found out. A reading that failed carries
// its error; the Core decides what the failure means.
type Observation struct {
	Now      time.Time
	Store    StoreReading
	Contract ContractReading
	// Peers is every live vendor but this one that answered, PeersErr
	// why asking failed.
	Peers    []Peer
	PeersErr error
	// Self is the worker ID this vendor holds.
	Self Holding
}

// StoreReading is the segment store's identity as read now.
type StoreReading struct {
	Info segment.StoreInfo
	Err  error
	// Refused: the store refused this vendor for a reason waiting cannot
	// fix (credentials). Gone: the KV bucket of the store is gone.
	Refused, Gone bool
}

// ContractReading is the recorded contract as read now, or as left by the
// write the last Decision asked for (Wrote).
type ContractReading struct {
	Rec kv.Contract
	Rev uint64
	// Err is kv.ErrNoContract, a *kv.CorruptError, or why reading (or
	// writing, with Wrote) failed.
	Err   error
	Wrote bool
}

// Holding is the worker ID a vendor holds, and where.
type Holding struct {
	ID    int
	Held  bool
	Where string
}

// Decision is what a step asks of the Guard.
type Decision struct {
	// Fatal is a disagreement waiting cannot fix: the vendor ends with it.
	Fatal error
	// Write asks for the contract to be recorded: created when Rev is 0,
	// else replaced at Rev. The Guard steps again with what it read back.
	Write *kv.Contract
	Rev   uint64
	// Note says why the check could not complete ("" when it did): the
	// gates stay as they were.
	Note string
	// Logs are the lines to log.
	Logs []Log
}

// Log is a line a Decision asks to log.
type Log struct {
	Level slog.Level
	Msg   string
	Args  []any
}

type writeKind int

const (
	writeNone    writeKind = iota
	writeRecord            // no contract recorded
	writeRestore           // the recorded one is corrupt
	writeFill              // the contract does not name the segment store yet
)

// Snowflake returns why snowflake claims and requests are refused, nil when
// they are not.
func (c *Core) Snowflake() error { return c.snowflake }

// Segments returns why segment requests are refused, nil when they are not.
func (c *Core) Segments() error { return c.segments }

// Want returns the terms this vendor vends by.
func (c *Core) Want() Terms { return c.want }

// ContractTTL returns the longest lease the contract says a vendor may
// hold: a claim in buckets created again waits at least that long.
func (c *Core) ContractTTL() time.Duration { return c.contractTTL }

// Checked returns when a check last completed, zero before the first.
func (c *Core) Checked() time.Time { return c.checked }

// Step makes one decision from o.
func (c *Core) Step(o Observation) Decision {
	var d Decision
	name, err := c.store(o, &d)
	if err != nil {
		return Decision{Fatal: err}
	}
	if o.PeersErr != nil {
		d.note(fmt.Sprintf("could not ask the live vendors for their settings: %v", o.PeersErr))
	}
	rec, ok := c.contract(o, &d)
	if !ok {
		return d
	}
	if d.Fatal = c.agree(o, rec, name); d.Fatal != nil {
		return d
	}
	if rec.Segments == "" && c.want.Segments != "" {
		fill := rec
		fill.Segments, fill.By, fill.At = c.want.Segments, c.self, o.Now.UTC()
		c.pending = writeFill
		d.Write, d.Rev = &fill, o.Contract.Rev
		return d
	}
	c.gates(o, name)
	c.checked = o.Now
	return d
}

// maxWrites bounds the writes of one pass: a write, then the step that
// reads what it left, then (a missing contract recorded without the store
// yet) one to fill it in.
const maxWrites = 3

// Pass is one check of the cluster, as the Guard runs it and tests step
// it: it steps with o and, while a decision asks for the contract to be
// written, writes it and steps again with what the write left. It returns
// the last decision, with every step's log lines; one that still asks for
// a write after maxWrites is a core that will not settle (a bug), and the
// caller ends the pass without carrying it out.
func Pass(o Observation, step func(Observation) Decision, write func(c kv.Contract, rev uint64) ContractReading) Decision {
	var logs []Log
	var d Decision
	for range maxWrites {
		d = step(o)
		logs = append(logs, d.Logs...)
		if d.Fatal != nil || d.Write == nil {
			break
		}
		o.Contract = write(*d.Write, d.Rev)
	}
	d.Logs = logs
	return d
}

func (d *Decision) note(s string) {
	if d.Note != "" {
		d.Note += "; "
	}
	d.Note += s
}

// store reads the store's identity: its name ("" when unknown this time),
// or an error waiting cannot fix.
func (c *Core) store(o Observation, d *Decision) (string, error) {
	s := o.Store
	switch {
	case s.Err == nil:
	case s.Refused && c.checked.IsZero():
		return "", s.Err // a setting to change, before this vendor served anything
	case s.Gone:
		return "", StoreLost(c.want.Segments, kv.NamesOf(c.want.Region).Segments, s.Err)
	default:
		d.note(fmt.Sprintf("could not read the segment store's identity: %v", s.Err))
		return "", nil
	}
	name := c.kind + ":" + s.Info.ID
	switch {
	case c.want.Segments == "":
		c.want.Segments = name
	case name != c.want.Segments:
		return "", fmt.Errorf("the segment store changed under this vendor: it vended from %s and now reaches %s (%s)", c.want.Segments, name, c.storeHint())
	}
	return name, nil
}

// storeHint says what most likely changed the store under a vendor.
func (c *Core) storeHint() string {
	if c.kind == KindKV {
		return "was KV bucket " + kv.NamesOf(c.want.Region).Segments + " deleted and created again, or restored from a backup?"
	}
	return "does LEAF_POSTGRES_URL now point at another database, or a restored copy of it?"
}

// StoreLost is the error of a KV segment store whose bucket is gone: its
// tags and their max_id went with it, and creating it again would start
// them over. name is the store as the contract names it, "" when unknown;
// bucket the store's bucket.
func StoreLost(name, bucket string, cause error) error {
	if name == "" {
		name = "in KV bucket " + bucket
	}
	return fmt.Errorf("%w: the segment store %s is gone (KV bucket %s deleted, or the NATS store lost its JetStream state: %v); its tags and their max_id went with it. "+
		"Restore the bucket, or record a new store with vendor cluster move-segments -lost, then add the tags again above the IDs they handed out (vendor tags add <tag> -start N)",
		segment.ErrUnavailable, name, bucket, cause)
}

// contract reads the recorded contract, or decides to record it: ok when
// rec is the contract in force and the check goes on.
func (c *Core) contract(o Observation, d *Decision) (rec kv.Contract, ok bool) {
	r := o.Contract
	var bad *kv.CorruptError
	switch {
	case r.Wrote && r.Err != nil:
		d.note(fmt.Sprintf("could not record the cluster contract: %v", r.Err))
		c.pending = writeNone
		return rec, false
	case r.Wrote:
		c.logWrite(r.Rec, d)
	case errors.Is(r.Err, kv.ErrNoContract), errors.As(r.Err, &bad):
		c.record(o, bad, d)
		return rec, false
	case r.Err != nil:
		d.note(fmt.Sprintf("could not read the cluster contract: %v", r.Err))
		return rec, false
	}
	c.contractTTL = r.Rec.LeaseTTL
	return r.Rec, true
}

// record decides to record this vendor's terms in place of a missing or
// corrupt contract, unless vendors that are serving run with others: then
// one side is misconfigured, and the vendors that served by the lost
// contract record it again.
func (c *Core) record(o Observation, bad *kv.CorruptError, d *Decision) {
	if why := disagreeing(o.Peers, c.want); why != "" {
		if c.disagreeSince.IsZero() {
			c.disagreeSince = o.Now
		}
		if o.Now.Sub(c.disagreeSince) >= OtherJetStreamAfter {
			d.Fatal = fmt.Errorf("no cluster contract is recorded in this JetStream, and %s; in %v that vendor did not record its own here, so it keeps it in another "+
				"JetStream (another domain joined by a leaf node, or another account): vendors answering the same subjects must share one JetStream",
				why, OtherJetStreamAfter)
			return
		}
		d.note("no cluster contract is recorded, and " + why + ": this vendor records its own only once the serving vendors agree with it")
		return
	}
	c.disagreeSince = time.Time{}
	w := c.want.Contract(c.leaseTTL, c.self, o.Now)
	d.Write = &w
	c.pending = writeRecord
	if bad != nil {
		// Written over (by hand, or by a reply sent where it should not
		// go): this vendor's terms, which it vends by, replace it.
		d.Rev, c.pending = bad.Revision, writeRestore
	}
}

// logWrite says what the write just made changed, when it was this
// vendor's.
func (c *Core) logWrite(rec kv.Contract, d *Decision) {
	kind := c.pending
	c.pending = writeNone
	if rec.By != c.self || kind == writeNone {
		return // another vendor's contract was in force: checked as any
	}
	level, msg := slog.LevelInfo, "cluster contract recorded"
	switch {
	case kind == writeFill:
		return
	case kind == writeRestore:
		level, msg = slog.LevelWarn, "cluster contract corrupt: recorded it again from this vendor's"
	case !c.checked.IsZero():
		level, msg = slog.LevelWarn, "cluster contract missing (deleted, or the NATS store lost its JetStream state): recorded it again from this vendor's"
	}
	d.Logs = append(d.Logs, Log{Level: level, Msg: msg, Args: []any{"bucket", kv.NamesOf(c.want.Region).Cluster, "epoch", rec.Epoch, "layout", rec.Layout,
		"worker_ids", rec.WorkerIDs, "segments", rec.Segments}})
}

// agree checks the contract in force against this vendor's terms and
// store: an error waiting cannot fix when they disagree.
func (c *Core) agree(o Observation, rec kv.Contract, name string) error {
	info := o.Store.Info
	if name != "" && info.MovedTo != "" && info.MovedTo == rec.Segments {
		return fmt.Errorf("the segments of this vendor's store (%s) were moved to %s at %s: restart this vendor with that store's settings (vendor cluster show)",
			name, info.MovedTo, info.MovedAt.Format(time.RFC3339))
	}
	err := Check(rec, c.want)
	var m *MismatchError
	if errors.As(err, &m) && !c.checked.IsZero() && rec.Why == "" && rec.At.After(c.checked) {
		m.Rerecorded = true
	}
	return err
}

// gates sets the gates from what the store and the peers say, once the
// contract holds.
func (c *Core) gates(o Observation, name string) {
	c.snowflake = nil
	if o.Self.Held {
		if conflict := VendingWith(o.Peers, o.Self.ID, o.Self.Where); conflict != nil {
			c.snowflake = Unsure(conflict.Error())
		}
	}
	if clash := regionClash(o.Peers, c.want.Region); clash != "" {
		c.snowflake, c.segments = Unsure(clash), Unsure(clash)
		return
	}
	info := o.Store.Info
	switch {
	case name == "":
		// Unknown this time: as it was.
	case info.MovedTo != "":
		c.segments = fmt.Errorf("%w: the segments of this vendor's store (%s) are sealed for a move to %s since %s, but the cluster contract still names "+
			"this store: a vendor cluster move-segments was interrupted or is running; run it again to finish the move",
			segment.ErrStoreMoved, name, info.MovedTo, info.MovedAt.Format(time.RFC3339))
	default:
		c.segments = nil
		if why := otherStore(o.Peers, name, c.want.Region); why != "" {
			c.segments = Unsure(why)
		}
	}
}

// Conflict is a live vendor that can vend with the worker ID this one
// holds or just claimed.
type Conflict struct {
	Peer Peer
	ID   int
	// Same: it holds the ID in the same bucket of the same JetStream, so
	// it got it from a store that went back (a lost write let the ID be
	// claimed twice); else it keeps its leases in another JetStream
	// answering the same subjects.
	Same bool
}

func (c *Conflict) Error() string {
	if c.Same {
		return fmt.Sprintf("vendor %s holds worker ID %d too, in the same bucket (%s): the NATS store went back (it lost acknowledged writes, or was "+
			"restored from a copy) and the ID was claimed twice; the one whose lease is not in the bucket any more gives it up",
			c.Peer.Instance, c.ID, c.Peer.Worker.Where)
	}
	return fmt.Sprintf("vendor %s vends with worker ID %d too, kept in %s of another JetStream (another domain joined by a leaf node, or another "+
		"account?): vendors answering the same subjects must share one JetStream, or claim disjoint LEAF_WORKER_ID_RANGEs",
		c.Peer.Instance, c.ID, c.Peer.Worker.Where)
}

// VendingWith returns the first of peers that could vend with worker ID id
// when it answered, nil when none. where is where this vendor holds id
// (kv.Lease.Where), "" when unknown.
func VendingWith(peers []Peer, id int, where string) *Conflict {
	for _, p := range peers {
		// The deadline and now are both the peer's clock's.
		if p.Worker.Held && p.Worker.ID == id && p.Worker.Deadline.After(p.Now) {
			return &Conflict{Peer: p, ID: id, Same: where != "" && p.Worker.Where == where}
		}
	}
	return nil
}

// otherStore says which live vendor serves segments from another store
// than name, "" when none.
// Peers of other regions are passed over: each region serves the same
// subjects from a store of its own, with IDs disjoint from the others'.
func otherStore(peers []Peer, name, region string) string {
	for _, p := range peers {
		if s := p.Terms.Segments; s != "" && s != name && !p.SegmentsRefused && p.Terms.Region == region {
			return fmt.Sprintf("vendor %s serves the same segment subjects from %s, this one from %s: the same tags would hand out the same IDs; give both one store (vendor cluster show)",
				p.Instance, s, name)
		}
	}
	return ""
}

// regionClash says which live vendor of another region has this region's
// number, or which vendor has this region's name with another number: two
// regions with one number hand out the same IDs. "" when none does.
func regionClash(peers []Peer, mine string) string {
	name, id, ok := strings.Cut(mine, "/")
	if !ok {
		return ""
	}
	for _, p := range peers {
		pname, pid, ok := strings.Cut(p.Terms.Region, "/")
		switch {
		case !ok:
		case pname != name && pid == id:
			return fmt.Sprintf("vendor %s of region %s has LEAF_REGION_ID %s, as this region %s has: two regions with one number hand out the same IDs; give each region its own LEAF_REGION_ID",
				p.Instance, pname, id, name)
		case pname == name && pid != id:
			return fmt.Sprintf("vendor %s of region %s has LEAF_REGION_ID %s, this one %s: a region has one number; set the same LEAF_REGION_ID on every vendor of region %s",
				p.Instance, name, pid, id, name)
		}
	}
	return ""
}

// disagreeing says which serving peer vends by other terms than want, ""
// when none does.
func disagreeing(peers []Peer, want Terms) string {
	for _, p := range peers {
		if !p.Worker.Held || p.Terms.Epoch == 0 || p.Terms.Region != want.Region {
			continue // another region has a contract of its own
		}
		switch {
		case p.Terms.Epoch != want.Epoch:
			return fmt.Sprintf("vendor %s vends with epoch %d, this one with %d", p.Instance, p.Terms.Epoch, want.Epoch)
		case p.Terms.Layout != want.Layout:
			return fmt.Sprintf("vendor %s vends with layout %s, this one with %s", p.Instance, p.Terms.Layout, want.Layout)
		case p.Terms.WorkerIDs != want.WorkerIDs:
			return fmt.Sprintf("vendor %s claims worker IDs %s, this one %s", p.Instance, p.Terms.WorkerIDs, want.WorkerIDs)
		case p.Terms.Segments != "" && want.Segments != "" && p.Terms.Segments != want.Segments:
			return fmt.Sprintf("vendor %s serves segments from %s, this one from %s", p.Instance, p.Terms.Segments, want.Segments)
		}
	}
	return ""
}
