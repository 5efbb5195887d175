package status

import (
	"cmp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/leaf-nats/leaf/vending"
)

// Metrics counts requests for vending.Observer, for /metrics and for the
// status page (which reads the same counts: one truth). The label children
// of each (mode, tag, code) are resolved once and cached, so the hot path
// does a map read under a read lock and a few atomic adds.
type Metrics struct {
	requests *prometheus.CounterVec
	ids      *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	dropped  *prometheus.CounterVec

	mu       sync.RWMutex
	children map[obsKey]obsChildren
	labelled map[string]bool // the tags with series of their own
	firsts   int             // of them, labelled when first asked for
	promoted int             // of them, labelled by Promote
}

// MetricTags is how many segment tags get series of their own, per metric.
// Of the request counts (leaf_requests_total, leaf_ids_total): the first
// asked for, and as many more again of those that matter (Promote). Of the
// state (leaf_segment_*): the tags that matter at each scrape (mattering).
// The others are added up under the tag OtherTags, so that a vendor serving
// 100,000 tags keeps a scrape of some thousand series; `vendor tags list`,
// the status page and micro stats name them all.
const MetricTags = 1000

// OtherTags is the tag label of the tags without series of their own.
const OtherTags = "_other"

// label is the tag label of tag's series, adding tag to the labelled ones
// while there is room; m.mu must be held for writing.
func (m *Metrics) label(tag string) string {
	switch {
	case tag == "" || m.labelled[tag]:
		return tag
	case m.firsts < MetricTags:
		m.labelled[tag] = true
		m.firsts++
		return tag
	}
	return OtherTags
}

// Promote gives the tags that matter (mattering) request series of their
// own from their next request on, up to MetricTags of them beyond the
// first asked for: a tag about to run out, asked for after the first
// thousand, still has the rate that its runway is divided by. A label once
// given stays, so that every series is a counter that only goes up.
func (m *Metrics) Promote(tags []string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, tag := range tags {
		if m.promoted >= MetricTags {
			return
		}
		if tag != "" && !m.labelled[tag] {
			m.labelled[tag] = true
			m.promoted++
		}
	}
}

// Labelled says whether tag has series of its own (else its counts are
// under OtherTags).
func (m *Metrics) Labelled(tag string) bool {
	if m == nil {
		return true
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.labelled[tag]
}

type obsKey struct {
	mode, tag string
	code      int
}

type obsChildren struct {
	requests, ids prometheus.Counter
	latency       prometheus.Observer
	totals        *obsTotals
}

// obsTotals are the counts of one (mode, tag, code) for the status page.
type obsTotals struct {
	requests, ids, nanos atomic.Int64
}

// NewMetrics registers the request metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaf_requests_total", Help: "Requests answered, by mode, segment tag and reply code (200: IDs).",
		}, []string{"mode", "tag", "code"}),
		ids: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaf_ids_total", Help: "IDs handed out, by mode and segment tag.",
		}, []string{"mode", "tag"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leaf_request_duration_seconds",
			Help:    "Time from receiving a request to sending its reply, by mode.",
			Buckets: []float64{5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3, 250e-3, 1},
		}, []string{"mode"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaf_requests_dropped_total",
			Help: "Requests dropped unanswered, with no ID taken, by mode and why: a reply subject that is no inbox (LEAF_REPLY_PREFIXES).",
		}, []string{"mode", "reason"}),
		children: map[obsKey]obsChildren{},
		labelled: map[string]bool{},
	}
	reg.MustRegister(m.requests, m.ids, m.latency, m.dropped)
	for _, mode := range []string{vending.ModeSnowflake, vending.ModeSegment, vending.ModeDecode} {
		for _, why := range vending.DropReasons {
			m.dropped.WithLabelValues(mode, why) // at 0, so that rules see the series before a drop
		}
	}
	return m
}

// Observe implements vending.Observer.
func (m *Metrics) Observe(mode, tag string, code, ids int, took time.Duration) {
	m.mu.RLock()
	c, ok := m.children[obsKey{mode, tag, code}]
	if !ok && tag != "" && !m.labelled[tag] && m.firsts >= MetricTags {
		// Past the labelled tags: counted under OtherTags.
		tag = OtherTags
		c, ok = m.children[obsKey{mode, tag, code}]
	}
	m.mu.RUnlock()
	if !ok {
		c = m.child(mode, tag, code)
	}
	c.requests.Inc()
	if c.ids != nil {
		c.ids.Add(float64(ids))
	}
	c.latency.Observe(took.Seconds())
	c.totals.requests.Add(1)
	c.totals.ids.Add(int64(ids))
	c.totals.nanos.Add(int64(took))
}

// child makes the series of (mode, tag, code), or finds them made by
// another request meanwhile.
func (m *Metrics) child(mode, tag string, code int) obsChildren {
	m.mu.Lock()
	defer m.mu.Unlock()
	tag = m.label(tag)
	k := obsKey{mode, tag, code}
	if c, ok := m.children[k]; ok {
		return c
	}
	c := obsChildren{
		requests: m.requests.WithLabelValues(mode, tag, strconv.Itoa(code)),
		latency:  m.latency.WithLabelValues(mode),
		totals:   &obsTotals{},
	}
	if code == vending.CodeOK && mode != vending.ModeDecode { // only these hand out IDs
		c.ids = m.ids.WithLabelValues(mode, tag)
	}
	m.children[k] = c
	return c
}

// Dropped implements vending.Observer.
func (m *Metrics) Dropped(mode, why string) { m.dropped.WithLabelValues(mode, why).Inc() }

// requestCount is what the status page shows of one (mode, tag, code):
// the counts of leaf_requests_total and leaf_ids_total, and the time taken.
type requestCount struct {
	Mode     string        `json:"mode"`
	Tag      string        `json:"tag"`
	Code     int           `json:"code"`
	Requests int64         `json:"requests"`
	IDs      int64         `json:"ids"`
	Took     time.Duration `json:"took_ns"`
}

// counts returns the counts so far, sorted by mode, tag and code.
func (m *Metrics) counts() []requestCount {
	if m == nil {
		return nil
	}
	m.mu.RLock()
	out := make([]requestCount, 0, len(m.children))
	for k, c := range m.children {
		out = append(out, requestCount{k.mode, k.tag, k.code, c.totals.requests.Load(), c.totals.ids.Load(), time.Duration(c.totals.nanos.Load())})
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b requestCount) int {
		return cmp.Or(cmp.Compare(a.Mode, b.Mode), cmp.Compare(a.Tag, b.Tag), cmp.Compare(a.Code, b.Code))
	})
	return out
}

// totals returns how many requests were answered in all, and how many of
// them with an error (requests dropped unanswered are neither), decode
// requests included.
func (m *Metrics) totals() (requests, errors int64) {
	if m == nil {
		return 0, 0
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for k, c := range m.children {
		n := c.totals.requests.Load()
		requests += n
		if k.code != vending.CodeOK {
			errors += n
		}
	}
	return requests, errors
}

// stateCollector reads the vendor's state at scrape time: segment buffers,
// store, clock and worker-ID lease. Nothing on the hot path pays for it.
type stateCollector struct {
	v *State
}

var (
	descSegLeft     = prometheus.NewDesc("leaf_segment_ids_left", "IDs left in the current segment.", []string{"tag"}, nil)
	descSegNext     = prometheus.NewDesc("leaf_segment_next_ready", "1 when the next segment is loaded.", []string{"tag"}, nil)
	descSegStep     = prometheus.NewDesc("leaf_segment_step", "Size of the last segment loaded (the dynamic step).", []string{"tag"}, nil)
	descSegLoads    = prometheus.NewDesc("leaf_segment_loads_total", "Segments loaded from the store.", []string{"tag"}, nil)
	descSegFailures = prometheus.NewDesc("leaf_segment_load_failures_total", "Segment loads that failed.", []string{"tag"}, nil)
	descSegLoadDur  = prometheus.NewDesc("leaf_segment_last_load_seconds", "Duration of the last segment load.", []string{"tag"}, nil)
	descSegRunway   = prometheus.NewDesc("leaf_segment_runway_ids", "IDs left in the tag's space above the highest segment this vendor allocated, before max_id reaches the largest int64 "+
		"(the tag "+OtherTags+": the least of the tags without series of their own); divided by leaf:tag_ids:rate1d, the time left (leaf:segment_runway_seconds).", []string{"tag"}, nil)
	descSegTags = prometheus.NewDesc("leaf_segment_tags", "Segment tags this vendor serves. The "+strconv.Itoa(MetricTags)+" that matter have leaf_segment_* series of their own at each scrape "+
		"(half the least runway, then the most IDs allocated); the others add up under the tag "+OtherTags+".", nil, nil)
	descStoreUp     = prometheus.NewDesc("leaf_store_up", "1 while the segment store answers.", []string{"store"}, nil)
	descClockSteps  = prometheus.NewDesc("leaf_clock_backward_steps_total", "Requests that found the clock behind the last ID's time.", nil, nil)
	descClockRefuse = prometheus.NewDesc("leaf_clock_backward_refused_total", "Requests refused (503) because the clock was too far behind.", nil, nil)
	descClockWaited = prometheus.NewDesc("leaf_clock_backward_wait_seconds_total", "Time spent waiting out small backwards clock steps.", nil, nil)
	descWorkerID    = prometheus.NewDesc("leaf_worker_id", "Worker ID held (-1: none).", []string{"mode"}, nil)
	descLeaseExpiry = prometheus.NewDesc("leaf_worker_lease_expiry_timestamp_seconds", "Unix time until which the worker may vend with its ID.", nil, nil)
	descRenewals    = prometheus.NewDesc("leaf_worker_lease_renewals_total", "Successful worker-ID lease renewals.", nil, nil)
	descRenewFails  = prometheus.NewDesc("leaf_worker_lease_renewal_failures_total", "Failed worker-ID lease renewals.", nil, nil)
	descReady       = prometheus.NewDesc("leaf_ready", "1 while the vendor can vend (what /readyz says).", nil, nil)
	descConnected   = prometheus.NewDesc("leaf_nats_connected", "1 while the vendor's service connection to NATS is up.", nil, nil)
	descRewinds     = prometheus.NewDesc("leaf_segment_store_rewinds_total", "Times the segment store was found behind IDs already handed out (restored, failed over to a lagging replica, or writes lost), and raised above them.", nil, nil)
	descUnseen      = prometheus.NewDesc("leaf_peers_unseen", "Worker IDs held by vendors this one has not seen on the vendors' safety exchange for over a lease TTL: the checks that rest on them miss them.", nil, nil)
	descSnowEnd     = prometheus.NewDesc("leaf_snowflake_epoch_end_timestamp_seconds", "Unix time at which the time bits of LEAF_SNOWFLAKE_LAYOUT after LEAF_EPOCH run out: snowflake requests are refused from then on.", nil, nil)
)

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSegLeft, descSegNext, descSegStep, descSegLoads, descSegFailures,
		descSegLoadDur, descSegRunway, descSegTags, descStoreUp, descClockSteps, descClockRefuse, descClockWaited, descWorkerID,
		descLeaseExpiry, descRenewals, descRenewFails, descReady, descConnected, descSnowEnd, descUnseen, descRewinds} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	s := c.v.Snapshot(false)
	own := mattering(s.Segments.Tags, MetricTags)
	c.v.src.Requests.Promote(own)
	for _, t := range perTag(s.Segments.Tags, own) {
		gauge(descSegLeft, float64(t.Current.End-t.Current.Value), t.Tag)
		gauge(descSegNext, b2f(t.NextReady), t.Tag)
		gauge(descSegStep, float64(t.Step), t.Tag)
		counter(descSegLoads, float64(t.Loads), t.Tag)
		counter(descSegFailures, float64(t.LoadFailures), t.Tag)
		gauge(descSegLoadDur, t.LastLoadTook.Seconds(), t.Tag)
		if t.Runway >= 0 {
			gauge(descSegRunway, float64(t.Runway), t.Tag)
		}
	}
	gauge(descSegTags, float64(s.Segments.TagsTotal))
	gauge(descStoreUp, b2f(s.Segments.StoreUp), s.Segments.Store)
	counter(descClockSteps, float64(s.Clock.BackwardSteps))
	counter(descClockRefuse, float64(s.Clock.BackwardRefused))
	counter(descClockWaited, s.Clock.BackwardWaited.Seconds())
	id := -1
	if s.Worker.Held {
		id = s.Worker.ID
	}
	gauge(descWorkerID, float64(id), s.Worker.Mode)
	gauge(descLeaseExpiry, float64(s.Worker.Deadline.UnixMilli())/1000)
	counter(descRenewals, float64(s.Worker.Renewals))
	counter(descRenewFails, float64(s.Worker.RenewalFailures))
	gauge(descReady, b2f(s.Ready))
	gauge(descConnected, b2f(s.NATS))
	gauge(descSnowEnd, float64(s.Contract.SnowflakeEnds.UnixMilli())/1000)
	gauge(descUnseen, float64(s.Contract.Unseen))
	counter(descRewinds, float64(s.Segments.Rewinds))
}

// mattering returns the tags that get series of their own, at most n of
// them: the n/2 closest to running out (the least runway), then the
// busiest (the most IDs allocated), ordered by tag. They are chosen again at
// each scrape, so that a tag that comes to matter is seen at once, whenever
// it was first asked for.
func mattering(tags []tagStatus, n int) []string {
	if len(tags) <= n {
		out := make([]string, len(tags))
		for i, t := range tags {
			out[i] = t.Tag
		}
		slices.Sort(out) // perTag searches it
		return out
	}
	ranked := slices.Clone(tags)
	slices.SortFunc(ranked, func(a, b tagStatus) int {
		// A tag with no segment allocated yet (runway -1) has all its IDs left.
		ra, rb := uint64(a.Runway), uint64(b.Runway)
		return cmp.Or(cmp.Compare(ra, rb), cmp.Compare(a.Tag, b.Tag))
	})
	chosen := make(map[string]bool, n)
	for _, t := range ranked[:n/2] {
		chosen[t.Tag] = true
	}
	slices.SortFunc(ranked, func(a, b tagStatus) int {
		return cmp.Or(cmp.Compare(b.Allocated, a.Allocated), cmp.Compare(a.Tag, b.Tag))
	})
	for _, t := range ranked {
		if len(chosen) == n {
			break
		}
		chosen[t.Tag] = true
	}
	out := make([]string, 0, n)
	for tag := range chosen {
		out = append(out, tag)
	}
	slices.Sort(out)
	return out
}

// perTag returns the tags named in own (sorted) and, when there are others,
// one more named OtherTags that stands for them: IDs left, loads and
// failures summed; next ready only when all are, the least step, the
// longest load, the least runway. OtherTags' counters can go down, when a
// tag comes to matter and leaves it.
func perTag(tags []tagStatus, own []string) []tagStatus {
	var out []tagStatus
	other := tagStatus{Tag: OtherTags, NextReady: true, Runway: -1}
	others := 0
	for _, t := range tags {
		if _, found := slices.BinarySearch(own, t.Tag); found {
			out = append(out, t)
			continue
		}
		if others == 0 {
			other.Step, other.LastLoadTook = t.Step, t.LastLoadTook
		}
		others++
		other.Current.End += t.Current.End - t.Current.Value
		other.NextReady = other.NextReady && t.NextReady
		other.Step, other.LastLoadTook = min(other.Step, t.Step), max(other.LastLoadTook, t.LastLoadTook)
		other.Loads += t.Loads
		other.LoadFailures += t.LoadFailures
		other.Allocated += t.Allocated
		if t.Runway >= 0 && (other.Runway < 0 || t.Runway < other.Runway) {
			other.Runway = t.Runway
		}
	}
	if others > 0 {
		out = append(out, other)
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collector returns the collector of v's state for /metrics.
func (v *State) Collector() prometheus.Collector { return stateCollector{v} }

// Build says which build runs: leaf_build_info's labels.
type Build struct {
	Version, Revision, GoVersion string
}

// NewRegistry returns a registry with the Go and process collectors,
// leaf_build_info and the request metrics; the state's collector is
// registered once the state exists.
func NewRegistry(build Build) (*prometheus.Registry, *Metrics) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "leaf_build_info",
		Help:        "A metric with a constant 1 whose labels say which build of the vendor runs.",
		ConstLabels: prometheus.Labels{"version": build.Version, "revision": build.Revision, "goversion": build.GoVersion},
	})
	g.Set(1)
	reg.MustRegister(g)
	return reg, NewMetrics(reg)
}
