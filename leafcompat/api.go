package leafcompat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/inflight"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// API answers leaf-server's HTTP API (its LeafController) on
// LEAF_HTTP_ADDR when LEAF_HTTP_LEAF_API is true, so that Leaf's clients
// move by changing their base URL:
//
//	GET /api/segment/get/{key}     a segment ID of tag key
//	GET /api/snowflake/get/{key}   a snowflake ID (key is ignored, as Leaf does)
//
// An ID is answered as Leaf does: 200 and the decimal alone. A failure is
// answered as Leaf's Spring Boot server does: 500 with Spring's JSON error
// body, whose message is Leaf's Result{id=-N, status=EXCEPTION} (-2: no
// such key; -3: no segment loaded, or the clock moved back too far; -1:
// anything else that keeps this vendor from vending); the header Leaf-Error
// says why in a sentence. A missing key is Spring's 404. Unlike Leaf, no
// mode is ever disabled and no answer is ever 0: a vendor that cannot vend
// answers an error.
//
// It takes IDs from the same objects as the NATS service, through the same
// gates (the cluster contract, the worker-ID lease), so its IDs share the
// guarantees of the NATS subjects. At most leafAPISlots requests take IDs
// at once and at most leafAPIQueue more wait for their turn, each no longer
// than leafAPIQueueWait; any other request is answered 503 with Retry-After
// at once, so that an HTTP flood gets fast errors instead of competing with
// the NATS handlers for the CPU, the generator's lock and the store.
type API struct {
	sf    vending.Snowflake
	segs  vending.Segments
	obs   vending.Observer
	calls *prometheus.CounterVec
	slots chan struct{} // held while taking an ID
	queue chan struct{} // held while waiting for or holding a slot
	wait  time.Duration // leafAPIQueueWait
	now   func() time.Time

	// taking are the requests past the queue's door; Close refuses new
	// ones, and those waiting for a slot give up their turn.
	taking inflight.Group
}

const (
	// leafAPIQueueWait bounds how long a request waits for a slot: long
	// enough to ride out a burst of clients arriving at once, short enough
	// that a flood is told to back off while its connection is still open.
	leafAPIQueueWait = 100 * time.Millisecond
	// leafAPITimeout bounds a request from its arrival to its ID: the
	// queue, then a segment load (which segment.Options.Wait bounds too).
	leafAPITimeout = 2 * time.Second
)

// leafAPISlots is how many requests may take IDs at once: a few per CPU,
// enough to keep the cores busy with a request waiting on the store.
func leafAPISlots() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// leafAPIQueue is how many requests may wait for a slot; the rest are
// refused without waiting.
func leafAPIQueue() int { return 16 * leafAPISlots() }

// Leaf's route prefixes.
const (
	SegmentPath   = "/api/segment/get/"
	SnowflakePath = "/api/snowflake/get/"
)

// New returns the API, taking IDs from sf and segs. It counts every request
// in leaf_requests_total and its siblings through obs, as a NATS request of
// one ID is counted, and by HTTP status in leaf_http_api_requests_total
// (registered with reg).
func New(sf vending.Snowflake, segs vending.Segments, obs vending.Observer, reg prometheus.Registerer) *API {
	a := &API{
		sf:   sf,
		segs: segs,
		obs:  obs,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaf_http_api_requests_total",
			Help: "Requests to Leaf's HTTP API (LEAF_HTTP_LEAF_API), by mode (segment, snowflake, none: no such route) and HTTP status. They are in leaf_requests_total too.",
		}, []string{"mode", "code"}),
		slots: make(chan struct{}, leafAPISlots()),
		queue: make(chan struct{}, leafAPISlots()+leafAPIQueue()),
		wait:  leafAPIQueueWait,
		now:   time.Now,
	}
	reg.MustRegister(a.calls)
	return a
}

// errLeafAPIBusy and errLeafAPIClosing refuse a request before it takes an
// ID: 503, the one status Leaf's API never gives.
var (
	errLeafAPIBusy    = fmt.Errorf("%w: too many HTTP requests at once; retry, or move this client to NATS (docs/migrating-from-leaf.md)", vending.ErrUnavailable)
	errLeafAPIClosing = fmt.Errorf("%w: this vendor is shutting down; retry on another", vending.ErrUnavailable)
)

func (a *API) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	start := time.Now()
	mode, key, ok := leafRoute(r.URL.Path)
	if !ok {
		// What Spring answers for a path no controller maps, such as
		// /api/segment/get/ with no key.
		a.writeError(rw, r, http.StatusNotFound, "", "No message available", "no such route: use /api/segment/get/<tag> or /api/snowflake/get/<key>")
		a.calls.WithLabelValues("none", "404").Inc()
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), leafAPITimeout)
	defer cancel()
	id, err := a.take(ctx, mode, key)
	tag := ""
	if mode == vending.ModeSegment {
		tag = key
	}
	if err != nil {
		code := vending.Code(err)
		if code == vending.CodeNotFound || code == vending.CodeBadRequest || errors.Is(err, errLeafAPIBusy) {
			tag = "" // keys that name no tag must not grow label sets
		}
		status := http.StatusInternalServerError
		if errors.Is(err, errLeafAPIBusy) || errors.Is(err, errLeafAPIClosing) {
			status = http.StatusServiceUnavailable
			rw.Header().Set("Retry-After", "1")
			a.writeError(rw, r, status, "", "", err.Error())
		} else {
			result := fmt.Sprintf("Result{id=%d, status=EXCEPTION}", leafResultID(mode, err))
			a.writeError(rw, r, status, "com.sankuai.inf.leaf.server.exception.LeafServerException", result, err.Error())
		}
		a.obs.Observe(mode, tag, code, 0, time.Since(start))
		a.calls.WithLabelValues(mode, strconv.Itoa(status)).Inc()
		return
	}
	rw.Header().Set("Content-Type", "text/plain;charset=UTF-8")
	var buf [20]byte
	rw.Write(strconv.AppendInt(buf[:0], id, 10))
	a.obs.Observe(mode, tag, vending.CodeOK, 1, time.Since(start))
	a.calls.WithLabelValues(mode, "200").Inc()
}

// leafRoute maps a path to its mode and key, as Spring maps Leaf's
// /api/{mode}/get/{key}: one non-empty path segment, with or without a
// trailing slash.
func leafRoute(path string) (mode, key string, ok bool) {
	if key, ok = strings.CutPrefix(path, SegmentPath); ok {
		mode = vending.ModeSegment
	} else if key, ok = strings.CutPrefix(path, SnowflakePath); ok {
		mode = vending.ModeSnowflake
	} else {
		return "", "", false
	}
	key = strings.TrimSuffix(key, "/")
	if key == "" || strings.Contains(key, "/") {
		return "", "", false
	}
	return mode, key, true
}

// take takes one ID in its turn.
func (a *API) take(ctx context.Context, mode, key string) (int64, error) {
	if err := a.acquire(ctx); err != nil {
		return 0, err
	}
	defer a.release()
	var id int64
	switch mode {
	case vending.ModeSnowflake:
		var buf [1]ids.Range
		rs, err := a.sf.NextRanges(buf[:0], 1)
		if err != nil {
			return 0, err
		}
		if len(rs) != 1 || rs[0].Count != 1 {
			return 0, fmt.Errorf("leaf API: asked for one snowflake ID, got %d runs", len(rs))
		}
		id = rs[0].First
	default:
		if err := segment.ValidateTag(key); err != nil {
			// Leaf's tags are any string; leaf-nats's are not, and one it
			// cannot hold is a tag it does not have.
			why := strings.TrimPrefix(err.Error(), segment.ErrInvalidTag.Error()+": ")
			return 0, fmt.Errorf("%w: no tag can be %q here: %s", segment.ErrUnknownTag, key, why)
		}
		var buf [2]ids.Range
		rs, ok, err := a.segs.TryTakeRanges(key, buf[:0], 1)
		if err == nil && !ok {
			rs, err = a.segs.TakeRanges(ctx, key, buf[:0], 1)
		}
		if err != nil {
			return 0, err
		}
		if len(rs) != 1 || rs[0].Count != 1 {
			return 0, fmt.Errorf("leaf API: asked for one ID of tag %q, got %d runs", key, len(rs))
		}
		id = rs[0].First
	}
	if id <= 0 {
		return 0, fmt.Errorf("leaf API: the %s source gave ID %d; refusing to hand it out", mode, id)
	}
	return id, nil
}

// acquire waits for a slot, up to leafAPIQueueWait and ctx, if the queue
// has room; it refuses every request once close has begun.
func (a *API) acquire(ctx context.Context) error {
	select {
	case a.queue <- struct{}{}:
	default:
		return errLeafAPIBusy
	}
	if !a.taking.Enter() {
		<-a.queue
		return errLeafAPIClosing
	}
	select {
	case a.slots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(a.wait)
	defer t.Stop()
	err := errLeafAPIBusy
	select {
	case a.slots <- struct{}{}:
		return nil
	case <-a.taking.Stopping():
		err = errLeafAPIClosing
	case <-ctx.Done():
	case <-t.C:
	}
	<-a.queue
	a.taking.Exit()
	return err
}

func (a *API) release() {
	<-a.slots
	<-a.queue
	a.taking.Exit()
}

// Close refuses new requests and waits for those taking IDs (each bounded
// by its time-out): the vendor releases its worker ID only after.
func (a *API) Close(context.Context) error {
	a.taking.Close()
	return nil
}

// leafResultID is the Result id Leaf gives for a failure like err: -2 for
// a key it does not have, -3 when no segment is loaded (store down, buffers
// empty) or the clock moved back beyond the tolerance, -1 otherwise (Leaf's
// "not initialised": here no worker ID, a contract that does not match,
// a vendor that cannot be sure).
func leafResultID(mode string, err error) int64 {
	switch {
	case errors.Is(err, segment.ErrUnknownTag):
		return -2
	case mode == vending.ModeSegment && errors.Is(err, segment.ErrUnavailable),
		mode == vending.ModeSnowflake && errors.Is(err, snowflake.ErrClockBackwards):
		return -3
	}
	return -1
}

// SpringError is the JSON body Spring Boot 1.5, which leaf-server runs on,
// gives a failed request (DefaultErrorAttributes), in its field order.
type SpringError struct {
	Timestamp int64  `json:"timestamp"`
	Status    int    `json:"status"`
	Error     string `json:"error"`
	Exception string `json:"exception,omitempty"`
	Message   string `json:"message"`
	Path      string `json:"path"`
}

// writeError answers status with Spring's body. message defaults to the
// sentence why, which also goes in the header Leaf-Error, on one line.
func (a *API) writeError(rw http.ResponseWriter, r *http.Request, status int, exception, message, why string) {
	why = strings.Map(func(c rune) rune {
		if c < ' ' || c == 0x7f {
			return ' '
		}
		return c
	}, why)
	if message == "" {
		message = why
	}
	body, _ := json.Marshal(SpringError{
		Timestamp: a.now().UnixMilli(),
		Status:    status,
		Error:     http.StatusText(status),
		Exception: exception,
		Message:   message,
		Path:      r.URL.Path,
	})
	h := rw.Header()
	h.Set("Content-Type", "application/json;charset=UTF-8")
	h.Set("Leaf-Error", why)
	rw.WriteHeader(status)
	rw.Write(body)
}
