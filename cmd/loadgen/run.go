package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/ordercheck"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/vending"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // duplicates, order violations, nothing vended, NATS unreachable, or a history not written or read
	exitUsage = 2
)

// config is the parsed command line.
type config struct {
	url      string
	mode     string
	tag      string
	conc     int
	n        int64
	d        time.Duration
	batch    int
	maxBatch int // the service's, asked at start
	rate     float64
	prefetch int
	json     bool
	timeout  time.Duration
	retries  int

	checkOrder   bool
	history      string // -history: the file to write
	checkHistory string // -check-history: the file to read
}

const usageHead = `loadgen puts request-reply load on leaf-nats workers, checks that every ID
is unique and positive, and reports throughput, latency percentiles and errors.

Usage: loadgen [flags]

  loadgen -mode snowflake -c 64 -d 10s
  loadgen -mode segment -tag order -batch 100 -n 100000 -json
  loadgen -mode segment -tag order -rate 5000 -d 30s     # open loop
  loadgen -mode segment -tag order -prefetch 10000 -c 8  # through the client's buffer

Every received ID is kept (8 bytes each) and sorted at the end to find
duplicates; a duplicate makes the exit status 1. Bad flags exit with 2.

  loadgen -mode segment -tag ledger -c 8 -d 30s -check-order -history run.jsonl
  loadgen -check-history run.jsonl

-check-order checks strict order across the whole run, the promise of a
strict tag (vendor tags add <tag> -strict): when a reply was received before
another request was sent, every ID of the later reply must be above every
ID of the earlier one. Replies that break it are counted as
order_violations; one makes the exit status 1. A normal tag served by
several vendors breaks it (each vendor hands out its own segment), and so
does snowflake across vendors (its IDs are only time-ordered): the check
finds what strict tags prevent. With -prefetch a request is one Next call;
with -retries, its first attempt is its send.

-history FILE writes one JSON line per request: a header line with the
run's wall-clock "start", then {"w":worker,"sent":ns,"recv":ns,"runs":
[[first,count],...]} with the times in ns since the start, or "error":code
instead of "runs". Lines are in chunks per worker, not in time order.
-check-history FILE checks a history offline and counts the violations the
online check counted (the Go function ordercheck.CheckHistory does the same).

Flags:
`

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	defURL := os.Getenv("LEAF_NATS_URL")
	if defURL == "" {
		defURL = nats.DefaultURL
	}
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.url, "url", defURL, "NATS `URL`(s), comma-separated; $LEAF_NATS_URL sets the default")
	fs.StringVar(&c.mode, "mode", "snowflake", "`snowflake` or segment: which subject to load")
	fs.StringVar(&c.tag, "tag", "", "segment business `tag` (required with -mode segment)")
	fs.IntVar(&c.conc, "c", 16, "`concurrency`: goroutines issuing requests (closed loop: each waits for its reply)")
	fs.Int64Var(&c.n, "n", 0, "total `requests` to send; with neither -n nor -d the run lasts 10s")
	fs.DurationVar(&c.d, "d", 0, "run `duration`, e.g. 30s (exclusive with -n)")
	fs.IntVar(&c.batch, "batch", 1, "IDs per request, 1 to the service's LEAF_MAX_BATCH (the request body is this count)")
	fs.Float64Var(&c.rate, "rate", 0, "open loop: total `requests/s` scheduled on a fixed timeline; latency counts from the scheduled time, so a stalled service shows as latency (0: closed loop)")
	fs.IntVar(&c.prefetch, "prefetch", 0, "take IDs through the client's prefetch buffer of `N` IDs (refilled at N/2); a request is then one Next call")
	fs.BoolVar(&c.json, "json", false, "print the report as one JSON object")
	fs.DurationVar(&c.timeout, "timeout", time.Second, "timeout of each request attempt")
	fs.IntVar(&c.retries, "retries", 0, "client retries on 503, timeout or no responders (0: report them as errors)")
	fs.BoolVar(&c.checkOrder, "check-order", false, "check strict order across the run: count order_violations, exit 1 on one")
	fs.StringVar(&c.history, "history", "", "write each request's send and receive times and IDs to `FILE` (JSON lines)")
	fs.StringVar(&c.checkHistory, "check-history", "", "check the order of the history in `FILE` instead of putting load (with -json at most)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q; all settings are flags (loadgen -h)", fs.Arg(0))
	}
	if c.checkHistory != "" {
		var other string
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "check-history" && f.Name != "json" {
				other = f.Name
			}
		})
		if other != "" {
			return c, fmt.Errorf("-%s with -check-history: checking a history puts no load; it takes -json only", other)
		}
		return c, nil
	}
	return c, c.validate()
}

func (c *config) validate() error {
	switch c.mode {
	case "snowflake":
		if c.tag != "" {
			return errors.New("-tag is for -mode segment; snowflake IDs have no tag")
		}
	case "segment":
		if err := segment.ValidateTag(c.tag); err != nil {
			return fmt.Errorf("-mode segment needs -tag: %w", err)
		}
	default:
		return fmt.Errorf("-mode %q: use snowflake or segment", c.mode)
	}
	switch {
	case c.conc < 1:
		return fmt.Errorf("-c %d: use at least 1", c.conc)
	case c.n < 0 || c.d < 0:
		return errors.New("-n and -d must not be negative")
	case c.n > 0 && c.d > 0:
		return errors.New("-n and -d both set: give a request count or a duration, not both")
	case c.batch < 1:
		return fmt.Errorf("-batch %d: use 1 or more (up to the service's LEAF_MAX_BATCH)", c.batch)
	case c.rate < 0:
		return fmt.Errorf("-rate %v: use a positive rate, or 0 for a closed loop", c.rate)
	case c.prefetch < 0 || c.prefetch == 1 || c.prefetch > vending.DefaultMaxBatch:
		return fmt.Errorf("-prefetch %d: use 2 to %d, or 0 for none", c.prefetch, vending.DefaultMaxBatch)
	case c.prefetch > 0 && c.batch != 1:
		return errors.New("-prefetch takes one ID per Next call; leave -batch at 1")
	case c.timeout <= 0:
		return fmt.Errorf("-timeout %v must be positive", c.timeout)
	case c.retries < 0:
		return fmt.Errorf("-retries %d must not be negative", c.retries)
	}
	if c.n == 0 && c.d == 0 {
		c.d = 10 * time.Second
	}
	return nil
}

// run is the whole program; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return exitUsage
	}
	if cfg.checkHistory != "" {
		return checkHistory(cfg, stdout, stderr)
	}
	nc, err := nats.Connect(cfg.url, nats.Name("leaf-loadgen"))
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: connect to %s: %v (set -url or LEAF_NATS_URL)\n", cfg.url, err)
		return exitFail
	}
	defer nc.Close()
	// The largest batch is the service's to say (`nats micro info leaf`);
	// without an answer, the requests will tell.
	cfg.maxBatch = max(cfg.batch, vending.DefaultMaxBatch)
	if maxBatch, err := vending.ServiceMaxBatch(nc, cfg.timeout); err == nil {
		if cfg.batch > maxBatch {
			fmt.Fprintf(stderr, "loadgen: -batch %d: the service takes at most %d IDs per request (its LEAF_MAX_BATCH)\n", cfg.batch, maxBatch)
			return exitUsage
		}
		cfg.maxBatch = maxBatch
	}
	r, err := load(ctx, nc, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return exitUsage
	}
	if err := output(cfg, r, r.print, stdout); err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return exitFail
	}
	fails := r.failures()
	for _, f := range fails {
		fmt.Fprintf(stderr, "loadgen: FAIL: %s\n", f)
	}
	if len(fails) > 0 {
		return exitFail
	}
	return exitOK
}

// output writes the report v as JSON with -json, else as text.
func output(cfg config, v any, text func(io.Writer), stdout io.Writer) error {
	if !cfg.json {
		text(stdout)
		return nil
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// failures says what makes the run fail, if anything.
func (r *report) failures() []string {
	var fails []string
	if r.Dups > 0 || r.Invalid > 0 {
		fails = append(fails, fmt.Sprintf("%d duplicate and %d non-positive IDs", r.Dups, r.Invalid))
	}
	if r.Requests == 0 {
		fails = append(fails, "no request succeeded; the first error: "+r.FirstError)
	}
	if r.OrderViolations != nil && *r.OrderViolations > 0 {
		fails = append(fails, fmt.Sprintf("%d order violations; the first: %s", *r.OrderViolations, r.OrderExamples[0]))
	}
	if r.HistoryError != "" {
		fails = append(fails, r.HistoryError)
	}
	return fails
}

// worker is one goroutine's results. Only its goroutine writes hist, ids
// and history; the counters are atomic for the progress line.
type worker struct {
	index    int
	hist     histogram
	ids      []int64   // the chunk being filled
	full     [][]int64 // filled chunks: no large copy as the IDs grow
	errs     map[string]int64
	firstErr string             // the first error's message
	history  *ordercheck.Buffer // nil without -history
	done     atomic.Int64       // successful requests
	failed   atomic.Int64
	_        [64]byte // keep the next worker's counters off this cache line
}

// take is one request: one Next, or one NextN of the batch.
type take func(ctx context.Context, dst []int64) ([]int64, error)

// shared is what a run's workers share.
type shared struct {
	cfg      config
	do       take
	tickets  atomic.Int64
	start    time.Time
	interval time.Duration       // open loop: between two tickets' due times
	order    *ordercheck.Checker // stamps sends and replies; nil without -check-order and -history
}

func load(ctx context.Context, nc *nats.Conn, cfg config, stderr io.Writer) (*report, error) {
	client, src, err := newSource(nc, cfg)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	s := &shared{cfg: cfg, do: newTake(src, cfg.batch), start: time.Now()}
	if cfg.rate > 0 {
		s.interval = time.Duration(float64(time.Second) / cfg.rate)
	}
	if cfg.checkOrder || cfg.history != "" {
		s.order = ordercheck.NewChecker(s.start)
	}
	hist, err := openHistory(cfg, src.Subject(), s.start)
	if err != nil {
		return nil, err
	}
	workers := make([]*worker, cfg.conc)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{index: i, errs: map[string]int64{}}
		if hist != nil {
			w.history = hist.w.Buffer(i)
		}
		workers[i] = w
		wg.Go(func() { w.loop(ctx, s) })
	}
	stopProgress := progress(cfg, workers, s.start, stderr)
	wg.Wait()
	stopProgress()
	elapsed := time.Since(s.start)
	r := summarize(cfg, workers, elapsed)
	if cfg.checkOrder {
		r.setOrder(s.order.Result())
	}
	if err := hist.finish(); err != nil {
		r.HistoryError = err.Error()
	}
	return r, nil
}

// newSource returns the client and the source of the IDs cfg asks for.
func newSource(nc *nats.Conn, cfg config) (*vending.Client, *vending.Source, error) {
	cc := vending.ClientConfig{Timeout: cfg.timeout, Retries: cfg.retries, MaxBatch: cfg.maxBatch}
	if cfg.retries == 0 {
		cc.Retries = -1 // none
	}
	if cfg.prefetch > 0 {
		cc.Prefetch, cc.LowWater = cfg.prefetch, cfg.prefetch/2
	}
	client, err := vending.NewClient(nc, cc)
	if err != nil {
		return nil, nil, err
	}
	if cfg.mode != "segment" {
		return client, client.Snowflake(), nil
	}
	src, err := client.Segment(cfg.tag)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, src, nil
}

func newTake(src *vending.Source, batch int) take {
	if batch > 1 {
		return func(ctx context.Context, dst []int64) ([]int64, error) {
			ids, err := src.NextN(ctx, batch)
			return append(dst, ids...), err
		}
	}
	return func(ctx context.Context, dst []int64) ([]int64, error) {
		id, err := src.Next(ctx)
		return append(dst, id), err
	}
}

// loop issues requests until the count or the duration is reached.
func (w *worker) loop(ctx context.Context, s *shared) {
	end := s.start.Add(s.cfg.d)
	for ctx.Err() == nil {
		if cap(w.ids)-len(w.ids) < s.cfg.batch {
			w.newChunk(s.cfg.batch)
		}
		k := s.tickets.Add(1) - 1
		if s.cfg.n > 0 && k >= s.cfg.n {
			return
		}
		began, ok := s.due(ctx, k, end)
		if !ok || !w.request(ctx, s, began) {
			return
		}
	}
}

// due returns the time ticket k's latency counts from, after waiting for
// it in an open loop, or false when the run ends first. In an open loop,
// ticket k is due at start + k*interval and its latency runs from then, so
// time spent waiting for a free worker is counted.
func (s *shared) due(ctx context.Context, k int64, end time.Time) (time.Time, bool) {
	now := time.Now()
	if s.interval == 0 {
		return now, s.cfg.d == 0 || now.Before(end)
	}
	due := s.start.Add(time.Duration(k) * s.interval)
	if s.cfg.d > 0 && !due.Before(end) {
		return due, false
	}
	if wait := due.Sub(now); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return due, false
		}
	}
	return due, true
}

// request sends one request and records what came back; false when the
// worker should stop.
func (w *worker) request(ctx context.Context, s *shared, began time.Time) bool {
	var sent ordercheck.Sent
	if s.order != nil {
		sent = s.order.Send()
	}
	before := len(w.ids)
	ids, err := s.do(ctx, w.ids)
	if err != nil {
		if ctx.Err() != nil {
			return false // interrupted: not the service's error
		}
		code := errorCode(err)
		if w.history != nil {
			w.history.Failure(sent.At, s.order.Now(), code)
		}
		w.errs[code]++
		w.failed.Add(1)
		if w.firstErr == "" {
			w.firstErr = err.Error()
		}
		// Asking again cannot help: the run says why.
		return !errors.Is(err, vending.ErrBadRequest) && !errors.Is(err, vending.ErrNotFound)
	}
	w.hist.record(uint64(time.Since(began)))
	got := ids[before:]
	if s.order != nil {
		req := s.order.Receive(sent, w.index, slices.Min(got), slices.Max(got))
		if w.history != nil {
			w.history.Reply(req.Sent, req.Received, got)
		}
	}
	w.ids = ids
	w.done.Add(int64(len(got)))
	return true
}

// chunkIDs is the size of a worker's ID chunk (512 KiB).
const chunkIDs = 1 << 16

func (w *worker) newChunk(batch int) {
	if len(w.ids) > 0 {
		w.full = append(w.full, w.ids)
	}
	w.ids = make([]int64, 0, max(chunkIDs, batch))
}

// errorCode names an error for errors_by_code: the reply code, or what
// kept the reply from coming.
func errorCode(err error) string {
	var verr *vending.Error
	switch {
	case errors.As(err, &verr):
		return strconv.Itoa(verr.Code)
	case errors.Is(err, nats.ErrNoResponders):
		return "no_responders"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case errors.Is(err, vending.ErrBadReply):
		return "bad_reply"
	default:
		return "other"
	}
}

// progress prints a line a second to stderr on runs that last a few
// seconds, and returns a function that stops it and waits.
func progress(cfg config, workers []*worker, start time.Time, stderr io.Writer) (stop func()) {
	if cfg.d > 0 && cfg.d < 3*time.Second {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var lastIDs int64
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				var ids, failed int64
				for _, w := range workers {
					ids += w.done.Load()
					failed += w.failed.Load()
				}
				fmt.Fprintf(stderr, "loadgen: %4.0fs  ids %d  (%.0f/s)  errors %d\n",
					now.Sub(start).Seconds(), ids, float64(ids-lastIDs), failed)
				lastIDs = ids
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// report is the result; its JSON is the -json output.
type report struct {
	Mode         string           `json:"mode"`
	Tag          string           `json:"tag,omitempty"`
	Concurrency  int              `json:"concurrency"`
	Batch        int              `json:"batch"`
	Prefetch     int              `json:"prefetch,omitempty"`
	Rate         float64          `json:"rate,omitempty"`
	Seconds      float64          `json:"seconds"`
	Requests     int64            `json:"requests"`
	ReqPerSec    float64          `json:"req_per_sec"`
	IDs          int64            `json:"ids"`
	IDsPerSec    float64          `json:"ids_per_sec"`
	Dups         int              `json:"dups"`
	Invalid      int              `json:"invalid"`
	Errors       int64            `json:"errors"`
	ErrorsByCode map[string]int64 `json:"errors_by_code"`
	FirstError   string           `json:"first_error,omitempty"`
	P50us        float64          `json:"p50_us"`
	P90us        float64          `json:"p90_us"`
	P99us        float64          `json:"p99_us"`
	P999us       float64          `json:"p999_us"`
	P9999us      float64          `json:"p9999_us"`
	MaxUs        float64          `json:"max_us"`
	// With -check-order only; the examples are the first few by receive time.
	OrderViolations *int64   `json:"order_violations,omitempty"`
	OrderExamples   []string `json:"order_examples,omitempty"`
	HistoryError    string   `json:"history_error,omitempty"` // -history not written in full
}

func summarize(cfg config, workers []*worker, elapsed time.Duration) *report {
	r := &report{
		Mode: cfg.mode, Tag: cfg.tag, Concurrency: cfg.conc, Batch: cfg.batch,
		Prefetch: cfg.prefetch, Rate: cfg.rate, Seconds: elapsed.Seconds(),
		ErrorsByCode: map[string]int64{},
	}
	var hist histogram
	total := 0
	for _, w := range workers {
		hist.merge(&w.hist)
		total += len(w.ids)
		for _, c := range w.full {
			total += len(c)
		}
		if r.FirstError == "" {
			r.FirstError = w.firstErr
		}
		for code, n := range w.errs {
			r.ErrorsByCode[code] += n
			r.Errors += n
		}
	}
	all := make([]int64, 0, total)
	for _, w := range workers {
		for _, c := range w.full {
			all = append(all, c...)
		}
		all = append(all, w.ids...)
		w.ids, w.full = nil, nil // let the copy be the only one
	}
	// The client refuses a reply with a non-positive ID as a bad reply;
	// count those with any that got past it.
	r.Invalid = int(r.ErrorsByCode["bad_reply"])
	for _, id := range all {
		if id <= 0 {
			r.Invalid++
		}
	}
	r.Dups = countDups(all)
	r.Requests = int64(hist.total)
	r.IDs = int64(len(all))
	r.ReqPerSec = float64(r.Requests) / elapsed.Seconds()
	r.IDsPerSec = float64(r.IDs) / elapsed.Seconds()
	us := func(ns uint64) float64 { return float64(ns) / 1e3 }
	r.P50us, r.P90us = us(hist.quantile(0.5)), us(hist.quantile(0.9))
	r.P99us, r.P999us = us(hist.quantile(0.99)), us(hist.quantile(0.999))
	r.P9999us, r.MaxUs = us(hist.quantile(0.9999)), us(hist.max)
	return r
}

func (r *report) print(w io.Writer) {
	what := r.Mode
	if r.Tag != "" {
		what += " " + r.Tag
	}
	loop := "closed loop"
	if r.Rate > 0 {
		loop = fmt.Sprintf("open loop at %.0f req/s", r.Rate)
	}
	fmt.Fprintf(w, "%s: %d goroutines, %s, batch %d, prefetch %d, %.2fs\n", what, r.Concurrency, loop, r.Batch, r.Prefetch, r.Seconds)
	fmt.Fprintf(w, "requests  %d  (%.0f/s)\n", r.Requests, r.ReqPerSec)
	fmt.Fprintf(w, "ids       %d  (%.0f/s)\n", r.IDs, r.IDsPerSec)
	fmt.Fprintf(w, "latency   p50 %s  p90 %s  p99 %s  p99.9 %s  p99.99 %s  max %s\n",
		fmtUs(r.P50us), fmtUs(r.P90us), fmtUs(r.P99us), fmtUs(r.P999us), fmtUs(r.P9999us), fmtUs(r.MaxUs))
	codes := make([]string, 0, len(r.ErrorsByCode))
	for code, n := range r.ErrorsByCode {
		codes = append(codes, fmt.Sprintf("%s: %d", code, n))
	}
	sort.Strings(codes)
	fmt.Fprintf(w, "errors    %d  %s\n", r.Errors, strings.Join(codes, ", "))
	if r.FirstError != "" {
		fmt.Fprintf(w, "          first: %s\n", r.FirstError)
	}
	fmt.Fprintf(w, "dups      %d  (non-positive: %d)\n", r.Dups, r.Invalid)
	r.printOrder(w)
}

func fmtUs(us float64) string {
	return time.Duration(us * 1e3).Round(10 * time.Nanosecond).String()
}
