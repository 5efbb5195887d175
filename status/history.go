package status

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/leaf-nats/leaf/vending"
)

// HistorySeries is how many series a History keeps of its own at each
// sample, and /history.json serves: the ones with the most IDs. The others
// are added up as one series, OtherSeries, so that a vendor serving
// 100,000 tags keeps a few kilobytes of history.
const HistorySeries = 8

// OtherSeries names the series that adds up those past HistorySeries.
const OtherSeries = "other tags"

// HistoryConfig configures a History. Requests and Allocator are
// required; the zero value of every other field means its default.
type HistoryConfig struct {
	// Requests are the counts sampled (the service's Observer).
	Requests *Metrics
	// Allocator tells how much of each tag's current segment is left.
	Allocator Allocator
	// Interval is the time between samples. Default 5 s.
	Interval time.Duration
	// Points is how many samples are kept. Default 60 (5 minutes at 5 s).
	Points int
	// Now is the clock samples are stamped with. Default time.Now.
	Now func() time.Time
}

// History samples the request counts every Interval into a ring of Points
// samples, so that the status page shows the last minutes as soon as it is
// opened, whoever had it open before (/history.json).
type History struct {
	cfg    HistoryConfig
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	prev   map[seriesKey]seriesCounts // the counts at the last sample
	prevAt time.Time
	ring   []historyPoint // oldest first, at most cfg.Points
}

// seriesKey is a series: a mode and a segment tag ("" for the others), or
// the series that adds up the rest (other).
type seriesKey struct {
	mode, tag string
	other     bool
}

// name is what the page calls the series: its mode and tag, never a bare
// number.
func (k seriesKey) name() string {
	switch {
	case k.other:
		return OtherSeries
	case k.tag == OtherTags:
		return k.mode + " (tags without series of their own)"
	case k.tag != "":
		return k.mode + " " + k.tag
	case k.mode == vending.ModeSegment:
		return "segment (unknown or bad tags)"
	}
	return k.mode
}

// seriesCounts are one series' counts: since the start, or over a sample.
type seriesCounts struct {
	requests, ids, errors int64
	took                  time.Duration
}

func (c seriesCounts) add(d seriesCounts) seriesCounts {
	return seriesCounts{c.requests + d.requests, c.ids + d.ids, c.errors + d.errors, c.took + d.took}
}

func (c seriesCounts) sub(d seriesCounts) seriesCounts {
	return seriesCounts{max(c.requests-d.requests, 0), max(c.ids-d.ids, 0), max(c.errors-d.errors, 0), max(c.took-d.took, 0)}
}

// historyPoint is one sample: what each series counted since the sample
// before, the HistorySeries with the most IDs of their own and the rest
// added up.
type historyPoint struct {
	at     time.Time
	span   time.Duration // since the sample before
	series []pointSeries // ordered by IDs, the other last
}

type pointSeries struct {
	key seriesKey
	seriesCounts
	left float64 // % of the tag's current segment left; -1: none loaded, or no tag
}

// OpenHistory takes a first sample and samples every c.Interval until
// Close.
func OpenHistory(c HistoryConfig) *History {
	h := newHistory(c)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.sample(h.cfg.Now())
	h.wg.Go(func() {
		t := time.NewTicker(h.cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				h.sample(h.cfg.Now())
			}
		}
	})
	return h
}

// newHistory returns a History that samples only when asked (sample).
func newHistory(c HistoryConfig) *History {
	if c.Interval <= 0 {
		c.Interval = 5 * time.Second
	}
	if c.Points <= 0 {
		c.Points = 60
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &History{cfg: c}
}

// Close stops sampling and waits for the sampler to end.
func (h *History) Close(context.Context) error {
	h.cancel()
	h.wg.Wait()
	return nil
}

// sample records what each series counted since the last sample, at now.
// The first sample only sets where counting starts.
func (h *History) sample(now time.Time) {
	cur := map[seriesKey]seriesCounts{}
	for _, c := range h.cfg.Requests.counts() {
		k := seriesKey{mode: c.Mode, tag: c.Tag}
		d := seriesCounts{requests: c.Requests, ids: c.IDs, took: c.Took}
		if c.Code != vending.CodeOK {
			d.errors = c.Requests
		}
		cur[k] = cur[k].add(d)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	prev, prevAt := h.prev, h.prevAt
	h.prev, h.prevAt = cur, now
	if prev == nil {
		return
	}
	deltas := make([]pointSeries, 0, len(cur))
	for k, c := range cur {
		deltas = append(deltas, pointSeries{key: k, seriesCounts: c.sub(prev[k]), left: -1})
	}
	// The most IDs in this sample first; a tie (idle series) goes to the
	// most IDs since the start, so that idle series keep their place.
	slices.SortFunc(deltas, func(a, b pointSeries) int {
		return cmp.Or(cmp.Compare(b.ids, a.ids), cmp.Compare(cur[b.key].ids, cur[a.key].ids),
			cmp.Compare(b.requests, a.requests), cmp.Compare(a.key.name(), b.key.name()))
	})
	p := historyPoint{at: now, span: now.Sub(prevAt), series: fold(deltas, HistorySeries)}
	h.fillLeft(p.series)
	h.ring = append(h.ring, p)
	if over := len(h.ring) - h.cfg.Points; over > 0 {
		h.ring = slices.Delete(h.ring, 0, over)
	}
}

// fold keeps the first n of ranked and adds the rest up as the other
// series.
func fold(ranked []pointSeries, n int) []pointSeries {
	if len(ranked) <= n {
		return ranked
	}
	other := pointSeries{key: seriesKey{other: true}, left: -1}
	for _, s := range ranked[n:] {
		other.seriesCounts = other.seriesCounts.add(s.seriesCounts)
	}
	return append(ranked[:n:n], other)
}

// fillLeft sets how much of each segment tag's current segment is left.
func (h *History) fillLeft(series []pointSeries) {
	at := map[string]int{}
	for i, s := range series {
		if s.key.mode == vending.ModeSegment && s.key.tag != "" && !s.key.other {
			at[s.key.tag] = i
		}
	}
	if len(at) == 0 || h.cfg.Allocator == nil {
		return
	}
	for _, t := range h.cfg.Allocator.Snapshot() {
		i, ok := at[t.Tag]
		if size := t.Current.End - t.Current.Start; ok && size > 0 {
			series[i].left = 100 * float64(t.Current.End-t.Current.Value) / float64(size)
		}
	}
}

// historyView is /history.json: the samples' times, oldest first, and the
// HistorySeries with the most IDs over them, each with one value per
// sample, then the rest added up as OtherSeries. The counts are those of
// each sample's span: a rate is a count divided by its span.
type historyView struct {
	Now      time.Time       `json:"now"`
	Interval time.Duration   `json:"interval_ns"`
	Window   time.Duration   `json:"window_ns"`
	Times    []time.Time     `json:"times"`
	Spans    []time.Duration `json:"spans_ns"`
	Series   []historySeries `json:"series"`
}

type historySeries struct {
	Name     string          `json:"name"`
	Mode     string          `json:"mode,omitempty"`
	Tag      string          `json:"tag,omitempty"`
	Requests []int64         `json:"requests"`
	IDs      []int64         `json:"ids"`
	Errors   []int64         `json:"errors"`
	Took     []time.Duration `json:"took_ns"`
	// Left is the share of the tag's current segment left, in percent;
	// -1 where none was loaded, or for a series with no one tag.
	Left []float64 `json:"left_pct"`
}

// view returns the history as /history.json serves it.
func (h *History) view() historyView {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := historyView{Now: h.cfg.Now().UTC(), Interval: h.cfg.Interval, Window: h.cfg.Interval * time.Duration(h.cfg.Points)}
	total := map[seriesKey]int64{}
	for _, p := range h.ring {
		v.Times = append(v.Times, p.at.UTC())
		v.Spans = append(v.Spans, p.span)
		for _, s := range p.series {
			total[s.key] += s.ids
		}
	}
	keys := make([]seriesKey, 0, len(total))
	for k := range total {
		if !k.other {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b seriesKey) int {
		return cmp.Or(cmp.Compare(total[b], total[a]), cmp.Compare(a.name(), b.name()))
	})
	kept := map[seriesKey]int{}
	for i, k := range keys[:min(len(keys), HistorySeries)] {
		kept[k] = i
		v.Series = append(v.Series, newHistorySeries(k, len(h.ring)))
	}
	if len(keys) > HistorySeries || h.hasOther() {
		kept[seriesKey{other: true}] = len(v.Series)
		v.Series = append(v.Series, newHistorySeries(seriesKey{other: true}, len(h.ring)))
	}
	for j, p := range h.ring {
		for _, s := range p.series {
			i, ok := kept[s.key]
			if !ok {
				i = kept[seriesKey{other: true}]
			}
			hs := &v.Series[i]
			hs.Requests[j] += s.requests
			hs.IDs[j] += s.ids
			hs.Errors[j] += s.errors
			hs.Took[j] += s.took
			if ok && s.left >= 0 {
				hs.Left[j] = s.left
			}
		}
	}
	return v
}

// hasOther says whether a sample added series up; h.mu is held.
func (h *History) hasOther() bool {
	for _, p := range h.ring {
		if n := len(p.series); n > 0 && p.series[n-1].key.other {
			return true
		}
	}
	return false
}

func newHistorySeries(k seriesKey, n int) historySeries {
	s := historySeries{Name: k.name(), Mode: k.mode, Tag: k.tag,
		Requests: make([]int64, n), IDs: make([]int64, n), Errors: make([]int64, n),
		Took: make([]time.Duration, n), Left: make([]float64, n)}
	for i := range s.Left {
		s.Left[i] = -1
	}
	return s
}

// serveHistory is /history.json.
func (h *History) serveHistory(rw http.ResponseWriter, _ *http.Request) {
	writeJSON(rw, h.view())
}
