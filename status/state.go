package status

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/strict"
	"github.com/leaf-nats/leaf/vending"
	"github.com/leaf-nats/leaf/workerid"
)

// Keeper is what the status reads of the worker-ID keeper
// (workerid.Keeper).
type Keeper interface {
	Status() workerid.Status
}

// Allocator is what the status reads of the segment allocator
// (segment.Allocator).
type Allocator interface {
	Snapshot() []segment.TagStatus // the tags asked for
	Known() int                    // the tags the store lists
	StoreUp() bool
	Rewinds() (int64, segment.Rewind)
}

// Rows lists the segment store's rows (segment.AdminStore).
type Rows interface {
	List(ctx context.Context) ([]segment.Row, error)
}

// Guard is what the status reads of the cluster guard (cluster.Guard).
type Guard interface {
	Status() cluster.Status
}

// Leaders is what the status reads of the strict tags' leads: the tags
// this vendor leads (strict.Leaders) and who leads a tag, as the leaders
// bucket says (kv.Leaders).
type Leaders interface {
	Status() []strict.Status
	Holder(ctx context.Context, tag string) (string, error)
}

// Sources are what a State reads. Every field is required but Leaders
// (without it, the page names no strict tag's leader).
type Sources struct {
	Instance  string
	Keeper    Keeper
	Allocator Allocator
	Store     Rows
	StoreKind string // as the contract names it: cluster.KindPostgres or KindKV
	Guard     Guard
	// Clock is the IDs' clock: peers compare theirs with its Now.
	Clock snowflake.Clock
	// Connected reports whether the service's NATS connection is up.
	Connected func() bool
	// LeaseTTL is the configured lease TTL (LEAF_WORKER_LEASE_TTL).
	LeaseTTL time.Duration
	// Requests counts the requests answered.
	Requests *Metrics
	// Leaders tells who leads the strict tags.
	Leaders Leaders
}

// State assembles what the status page, the micro stats handler, /readyz
// and the metrics show.
type State struct {
	src     Sources
	started time.Time

	statsMu sync.Mutex // guards the status micro stats last read
	stats   Status
	statsAt time.Time

	rowsMu sync.Mutex // guards the cached store rows
	rows   []rowStatus
	rowsAt time.Time
	rowErr string

	holdersMu sync.Mutex // guards holders
	holders   map[string]holderSeen
}

// NewState reads src.
func NewState(src Sources) *State {
	return &State{src: src, started: time.Now().UTC()}
}

// RewindShown is how long /readyz and the status page tell of a segment
// store found behind what was handed out.
const RewindShown = 10 * time.Minute

// Status is one vendor's state as JSON.
type Status struct {
	Instance string    `json:"instance"`
	Started  time.Time `json:"started"`
	Now      time.Time `json:"now"`
	Ready    bool      `json:"ready"`
	NotReady string    `json:"not_ready,omitempty"` // why not, for people
	// Modes says, for each mode, why the vendor cannot serve it ("" when
	// it can): a vendor may serve segments while it claims a worker ID.
	Modes    ModeReadiness `json:"modes"`
	NATS     bool          `json:"nats_connected"`
	Contract ContractState `json:"contract"`
	Worker   WorkerStatus  `json:"worker"`
	Clock    clockStatus   `json:"clock"`
	Segments segmentStatus `json:"segments"`
	// Requests are the counts of /metrics' leaf_requests_total and
	// leaf_ids_total, with the time taken (status page only).
	Requests []requestCount `json:"requests,omitempty"`
}

// workerInfo describes the worker ID held last.
type workerInfo struct {
	ID       int       `json:"id"`
	Mode     string    `json:"mode"` // "kv-lease" or "static"
	Where    string    `json:"where"`
	PrevLast int64     `json:"previous_last_ms"`
	Claimed  time.Time `json:"claimed"`
}

// ContractState is this vendor's view of the cluster contract.
type ContractState struct {
	// Segments is the segment store this vendor vends from, as the
	// contract names it ("" until checked).
	Segments string `json:"segments"`
	// Epoch and WorkerIDs are this vendor's terms (LEAF_EPOCH,
	// LEAF_WORKER_ID_RANGE): peers compare theirs with them.
	Epoch     int64  `json:"epoch"`
	WorkerIDs string `json:"worker_ids"`
	// Layout is this vendor's snowflake layout (LEAF_SNOWFLAKE_LAYOUT):
	// "default" or "js53".
	Layout string `json:"layout"`
	// LayoutBits is its bit split, high bits first: unused, time, worker
	// ID, sequence ("1+41+10+12").
	LayoutBits string `json:"layout_bits"`
	// SnowflakeEnds is when the layout's time bits after Epoch run out.
	SnowflakeEnds time.Time `json:"snowflake_ends"`
	// Note is why the last check could not complete; Refused why segment
	// requests are refused, SnowflakeRefused why snowflake ones are;
	// Blind which vendors holding worker IDs this one cannot see.
	Note             string `json:"note,omitempty"`
	Blind            string `json:"blind,omitempty"`
	Unseen           int    `json:"peers_unseen"`
	Refused          string `json:"segments_refused,omitempty"`
	SnowflakeRefused string `json:"snowflake_refused,omitempty"`
}

// WorkerStatus is the worker ID held last.
type WorkerStatus struct {
	workerInfo
	Held bool `json:"held"`
	// LeaseTTL is the longest lease this vendor holds or was configured
	// for: a claim after lost buckets waits at least this long.
	LeaseTTL time.Duration `json:"lease_ttl_ns"`
	// Waiting is why the claim in progress waits; LastError why the last
	// one failed.
	Waiting   string `json:"waiting,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// Deadline is when the lease (or static reservation) runs out unless
	// renewed; its millisecond is the last timestamp reported to the store.
	Deadline        time.Time `json:"deadline"`
	LastReportedMs  int64     `json:"last_reported_ms"`
	LastIDMs        int64     `json:"last_id_ms"`
	Renewals        uint64    `json:"renewals"`
	RenewalFailures uint64    `json:"renewal_failures"`
}

type clockStatus struct {
	BackwardSteps   uint64        `json:"backward_steps"`
	BackwardRefused uint64        `json:"backward_refused"`
	BackwardWaited  time.Duration `json:"backward_waited_ns"`
}

type segmentStatus struct {
	Store   string `json:"store"`
	StoreUp bool   `json:"store_up"`
	// Rewinds counts the times the store was found behind what was handed
	// out (and raised above it); LastRewind says the last, while it is
	// recent.
	Rewinds    int64       `json:"rewinds"`
	LastRewind string      `json:"last_rewind,omitempty"`
	Tags       []tagStatus `json:"tags"`
	// TagsTotal is how many tags this vendor serves (the store lists);
	// Tags lists those asked for since it started, or the most recently
	// loaded of them when there are more than a reply holds (Trim).
	TagsTotal int         `json:"tags_total"`
	Rows      []rowStatus `json:"rows,omitempty"`
	RowsTotal int         `json:"rows_total,omitempty"`
	RowsErr   string      `json:"rows_error,omitempty"`
}

// rowStatus is a row of the segment store, named as in the table.
type rowStatus struct {
	Tag         string    `json:"biz_tag"`
	MaxID       int64     `json:"max_id"`
	Step        int64     `json:"step"`
	Description string    `json:"description"`
	Updated     time.Time `json:"update_time"`
	Strict      bool      `json:"strict"`
}

type tagStatus struct {
	Tag          string        `json:"tag"`
	Current      segRange      `json:"current"`
	Next         *segRange     `json:"next,omitempty"` // when loaded
	NextReady    bool          `json:"next_ready"`
	Loading      bool          `json:"loading"`
	Step         int64         `json:"step"`
	MinStep      int64         `json:"min_step"`
	Loads        int64         `json:"loads"`
	LoadFailures int64         `json:"load_failures"`
	LastLoad     time.Time     `json:"last_load"`
	LastLoadTook time.Duration `json:"last_load_took_ns"`
	LastError    string        `json:"last_error,omitempty"`
	// Runway is how many IDs are left in the tag's space above the highest
	// segment allocated here, before max_id reaches the largest int64
	// (-1: none allocated yet); Exhausted that none are.
	Runway    int64 `json:"runway_ids"`
	Exhausted bool  `json:"exhausted,omitempty"`
	// Allocated is how many IDs the store allocated for the tag here: how
	// busy it is.
	Allocated int64 `json:"allocated_ids"`
	// Strict: one vendor at a time, its leader, serves the tag; Leader
	// says which, on the status page (addLeaders).
	Strict bool   `json:"strict"`
	Leader string `json:"leader,omitempty"`
}

// segRange is a segment: IDs [start, end), value the next to hand out.
type segRange struct {
	Start int64 `json:"start"`
	Value int64 `json:"value"`
	End   int64 `json:"end"`
}

func toRange(s segment.Segment) segRange { return segRange{s.Start, s.Value, s.End} }

// Snapshot returns the state; withRows adds the store's rows (cached for
// two seconds, so a page refreshing every second costs the store little)
// and the request counts.
func (v *State) Snapshot(withRows bool) Status {
	s, ks := v.head()
	var buffered bool
	s.Segments.Tags, buffered = v.tags()
	s.Segments.TagsTotal = max(v.src.Allocator.Known(), len(s.Segments.Tags))
	if withRows {
		s.Segments.Rows, s.Segments.RowsErr = v.storeRows()
		s.Requests = v.src.Requests.counts()
	}
	s.setReady(ks, buffered)
	return s
}

// readiness is Snapshot without the tags, what /readyz says: they are read
// only when the store is down, to see whether buffers are left.
func (v *State) readiness() Status {
	s, ks := v.head()
	buffered := false
	if !s.Segments.StoreUp {
		_, buffered = v.tags()
	}
	s.setReady(ks, buffered)
	return s
}

// NotReady says why each mode cannot be served now, "" for one that can:
// what /readyz says.
func (v *State) NotReady() ModeReadiness { return v.readiness().Modes }

// Modes returns which modes the vendor can serve now (vending.Readiness):
// a vendor of a region that cannot serve one leaves its queue group.
func (v *State) Modes() (snowflake, segments bool) {
	m := v.readiness().Modes
	return m.Snowflake == "", m.Segments == ""
}

// head is the state but for its tags, and the worker-ID keeper's status.
func (v *State) head() (Status, workerid.Status) {
	s := Status{Instance: v.src.Instance, Started: v.started, Now: v.src.Clock.Now().UTC()}
	ks := v.src.Keeper.Status()
	s.Worker = WorkerStatus{
		workerInfo:      workerInfo{ks.ID, ks.Mode, ks.Where, ks.PrevLast, ks.Claimed},
		Held:            ks.Held,
		Deadline:        ks.Deadline.UTC(),
		LastReportedMs:  ks.Deadline.UnixMilli(),
		LastIDMs:        ks.LastIDMs,
		Renewals:        ks.Renewals,
		RenewalFailures: ks.RenewalFailures,
		Waiting:         ks.Waiting,
	}
	if ks.LastError != nil {
		s.Worker.LastError = ks.LastError.Error()
	}
	gs := v.src.Guard.Status()
	s.Worker.LeaseTTL = max(v.src.LeaseTTL, gs.LeaseTTL)
	s.Contract.Segments, s.Contract.Note, s.Contract.Blind, s.Contract.Unseen = gs.Terms.Segments, gs.Note, gs.Blind, gs.Unseen
	s.Contract.Epoch, s.Contract.WorkerIDs = gs.Terms.Epoch, gs.Terms.WorkerIDs
	layout, _ := snowflake.ParseLayout(gs.Terms.Layout) // the vendor's own terms: one it vends in
	s.Contract.Layout, s.Contract.LayoutBits = layout.Name(), layout.String()
	s.Contract.SnowflakeEnds = SnowflakeEnds(s.Contract.Epoch, layout)
	s.Contract.Refused, s.Contract.SnowflakeRefused = gs.SegmentsRefused, gs.SnowflakeRefused
	s.Clock = clockStatus{ks.Clock.BackwardSteps, ks.Clock.BackwardRefused, ks.Clock.BackwardWaited}
	s.Segments = segmentStatus{Store: v.src.StoreKind, StoreUp: v.src.Allocator.StoreUp()}
	var rw segment.Rewind
	if s.Segments.Rewinds, rw = v.src.Allocator.Rewinds(); s.Segments.Rewinds > 0 && time.Since(rw.At) < RewindShown {
		s.Segments.LastRewind = rw.At.UTC().Format(time.RFC3339) + ": " + rw.String()
	}
	s.NATS = v.src.Connected()
	return s, ks
}

// tags are the tags asked for, and whether any has IDs buffered.
func (v *State) tags() (out []tagStatus, buffered bool) {
	for _, t := range v.src.Allocator.Snapshot() {
		ts := tagStatus{
			Tag: t.Tag, Current: toRange(t.Current), NextReady: t.NextReady, Loading: t.Loading,
			Step: t.Step, MinStep: t.MinStep, Loads: t.Loads, LoadFailures: t.LoadFailures,
			LastLoad: t.LastLoad.UTC(), LastLoadTook: t.LastLoadTook,
			Runway: -1, Exhausted: t.Exhausted, Allocated: t.Allocated, Strict: t.Strict,
		}
		if t.High > 0 {
			ts.Runway = math.MaxInt64 - t.High
		}
		if t.NextReady {
			next := toRange(t.Next)
			ts.Next = &next
		}
		if t.LastError != nil {
			ts.LastError = t.LastError.Error()
		}
		buffered = buffered || t.Current.Value < t.Current.End || t.NextReady
		out = append(out, ts)
	}
	return out, buffered
}

// ModeReadiness says why each mode cannot be served, "" when it can.
type ModeReadiness struct {
	Snowflake string `json:"snowflake,omitempty"`
	Segments  string `json:"segments,omitempty"`
}

// setReady decides what the vendor can serve: ready when it can serve both
// modes, with why not for each that it cannot.
func (s *Status) setReady(ks workerid.Status, buffered bool) {
	s.Modes = ModeReadiness{Snowflake: snowflakeNotReady(*s, ks), Segments: segmentsNotReady(*s, buffered)}
	c := s.Contract
	switch m := s.Modes; {
	case m.Snowflake != "" && m.Snowflake == m.Segments:
		s.NotReady = m.Snowflake
	case c.Refused != "" && m.Segments == segmentsRefused+c.Refused && m.Snowflake == snowflakeRefused+c.Refused:
		// One cause shuts both gates (an embedded store gone): say it once.
		s.NotReady = "both modes refused: " + c.Refused
	case m.Snowflake != "" && m.Segments != "":
		s.NotReady = m.Snowflake + "; " + m.Segments
	default:
		s.NotReady = m.Snowflake + m.Segments
	}
	s.Ready = s.NotReady == ""
}

// segmentsNotReady says why the vendor cannot serve segments, or "".
func segmentsNotReady(s Status, buffered bool) string {
	switch {
	case !s.NATS:
		return "NATS connection down"
	case s.Contract.Refused != "":
		return segmentsRefused + s.Contract.Refused
	case !s.Segments.StoreUp && !buffered:
		return "segment store unreachable and no buffered segments"
	}
	return ""
}

// snowflakeNotReady says why the vendor cannot serve snowflake IDs, or "".
func snowflakeNotReady(s Status, ks workerid.Status) string {
	switch {
	case !s.NATS:
		return "NATS connection down"
	case !s.Worker.Held || !s.Now.Before(ks.Deadline):
		why := "no worker-ID lease held"
		if ks.Waiting != "" {
			why += ": " + ks.Waiting
			if left := ks.WaitingUntil.Sub(s.Now); !ks.WaitingUntil.IsZero() && left > 0 {
				why += fmt.Sprintf(" (%v left)", left.Round(100*time.Millisecond))
			}
		} else if ks.LastError != nil {
			why += ": " + ks.LastError.Error()
		}
		return why
	case s.Contract.SnowflakeRefused != "":
		return snowflakeRefused + s.Contract.SnowflakeRefused
	}
	return ""
}

// What a mode's readiness says before the gate's refusal.
const (
	segmentsRefused  = "segments refused: "
	snowflakeRefused = "snowflake refused: "
)

func (v *State) storeRows() ([]rowStatus, string) {
	v.rowsMu.Lock()
	defer v.rowsMu.Unlock()
	if time.Since(v.rowsAt) > 2*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		rows, err := v.src.Store.List(ctx)
		v.rowsAt, v.rowErr = time.Now(), ""
		if err != nil {
			v.rowErr = err.Error() // keep showing the last rows read
		} else {
			v.rows = v.rows[:0]
			for _, r := range rows {
				v.rows = append(v.rows, rowStatus{r.Tag, r.MaxID, r.Step, r.Description, r.Updated.UTC(), r.Strict})
			}
		}
	}
	return v.rows, v.rowErr
}

// SnowflakeEnds is the first millisecond the time bits of layout after
// epoch cannot hold: from then on every snowflake request is refused
// (uid-generator's users met theirs in production, its issue #100).
func SnowflakeEnds(epoch int64, layout snowflake.Layout) time.Time { return layout.Ends(epoch) }

// serviceSummary is what each endpoint's micro stats tell of the whole
// vendor, so that `nats micro stats leaf` shows it whichever endpoint one
// reads.
type serviceSummary struct {
	Instance string `json:"instance"`
	Version  string `json:"version"`
	Ready    bool   `json:"ready"`
	NotReady string `json:"not_ready,omitempty"`
	WorkerID int    `json:"worker_id"` // -1: none held
	// Answered and Errors count the requests answered since the vendor
	// started, as /metrics does: micro's own counts miss the errors of
	// requests answered after they waited (for the store, or the clock),
	// since micro counts a request when its handler returns.
	Answered int64 `json:"answered"`
	Errors   int64 `json:"errors"`
}

// StatsTags and PageTags are how many tags micro stats and /status.json
// list at most: a NATS reply must fit in max_payload (64 KiB in the shipped
// configuration) whatever the number of tags, and a page read every second
// need not carry 100,000 rows. `vendor tags list` and /status.json?tags=all
// list every one.
const (
	StatsTags = 32
	PageTags  = 500
)

// Trim keeps at most n of s's tags, the most recently loaded first (in tag
// order when they tie), and the first n of the store's rows; TagsTotal and
// RowsTotal still count them all.
func (s *Status) Trim(n int) {
	if tags := s.Segments.Tags; len(tags) > n {
		tags = slices.Clone(tags)
		slices.SortStableFunc(tags, func(a, b tagStatus) int { return b.LastLoad.Compare(a.LastLoad) })
		s.Segments.Tags = tags[:n]
	}
	s.Segments.RowsTotal = len(s.Segments.Rows)
	s.Segments.Rows = s.Segments.Rows[:min(n, len(s.Segments.Rows))]
}

// statsSnapshot is the status that micro stats tell, trimmed: read once for
// all the endpoints of one stats request, and at most every half second.
func (v *State) statsSnapshot() Status {
	v.statsMu.Lock()
	defer v.statsMu.Unlock()
	if time.Since(v.statsAt) > 500*time.Millisecond {
		v.stats = v.Snapshot(false)
		v.stats.Trim(StatsTags)
		v.statsAt = time.Now()
	}
	return v.stats
}

// EndpointStats returns the data of each endpoint's micro stats (version is
// the build's): the summary everywhere; the whole status under the
// snowflake endpoint (the status page's cluster table reads it there), the
// segment buffers under the segment endpoint, the epoch under decode.
func (v *State) EndpointStats(version string) func(endpoint string) any {
	return func(endpoint string) any {
		s := v.statsSnapshot()
		sum := serviceSummary{Instance: s.Instance, Version: version, Ready: s.Ready, NotReady: s.NotReady, WorkerID: -1}
		sum.Answered, sum.Errors = v.src.Requests.totals()
		if s.Worker.Held {
			sum.WorkerID = s.Worker.ID
		}
		switch endpoint {
		case vending.EndpointSnowflake:
			return struct {
				Status
				Service serviceSummary `json:"service"`
			}{s, sum}
		case vending.EndpointSegment:
			return struct {
				Service  serviceSummary `json:"service"`
				Segments segmentStatus  `json:"segments"`
			}{sum, s.Segments}
		case vending.EndpointDecode:
			return struct {
				Service       serviceSummary `json:"service"`
				Epoch         int64          `json:"epoch"`
				SnowflakeEnds time.Time      `json:"snowflake_ends"`
			}{sum, s.Contract.Epoch, s.Contract.SnowflakeEnds}
		}
		return struct {
			Service serviceSummary `json:"service"`
		}{sum}
	}
}
