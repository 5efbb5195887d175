package vending

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/segment"
)

// Sentinels a *Error matches with errors.Is, one per reply code, and the
// errors of the client itself.
var (
	// ErrBadRequest: the request was malformed (400). Retrying cannot help.
	ErrBadRequest = errors.New("vending: bad request")
	// ErrNotFound: the segment tag does not exist (404).
	ErrNotFound = errors.New("vending: not found")
	// ErrUnavailable: the service cannot vend now (503), or no worker
	// answered within the retries. Retrying later may help.
	ErrUnavailable = errors.New("vending: unavailable")
	// ErrInternal: a worker failed unexpectedly (500).
	ErrInternal = errors.New("vending: internal error")
	// ErrClientClosed is returned by calls after Client.Close.
	ErrClientClosed = errors.New("vending: client closed")
)

// Error is an error reply of the service: its code (400, 404, 500, 503) and
// the sentence it sent. Inspect it with errors.As, or match a code with
// errors.Is(err, ErrNotFound) and the other sentinels.
type Error struct {
	Code    int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("vending: error %d: %s", e.Code, e.Message)
}

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.Code == CodeBadRequest
	case ErrNotFound:
		return e.Code == CodeNotFound
	case ErrUnavailable:
		return e.Code == CodeUnavailable
	case ErrInternal:
		return e.Code == CodeInternal
	}
	return false
}

// Client defaults.
const (
	DefaultClientTimeout = time.Second
	DefaultRetries       = 3
	DefaultBackoffMin    = 20 * time.Millisecond
	DefaultBackoffMax    = time.Second
)

// maxPrefetchBatches bounds a prefetch buffer, in max batches: each refill
// sends that many requests at once.
const maxPrefetchBatches = 16

// binaryFrom is the smallest count asked for in the binary encoding: from
// there on its fixed 8 bytes an ID beat the text's up to 20, and decoding
// it is a load per ID instead of a parse.
const binaryFrom = 64

// clientConfig is what the options set; validate checks it all at once.
type clientConfig struct {
	prefix     string
	timeout    time.Duration
	retries    int
	backoffMin time.Duration
	backoffMax time.Duration
	maxBatch   int
	prefetch   int // 0: no prefetch
	lowWater   int
}

// ClientOption configures a Client.
type ClientOption func(*clientConfig)

// WithPrefix sets the subject prefix (default "leaf"), as LEAF_SUBJECT_PREFIX
// does for the workers.
func WithPrefix(prefix string) ClientOption {
	return func(c *clientConfig) { c.prefix = prefix }
}

// WithTimeout bounds each request attempt (default 1s). The context passed
// to Next bounds the whole call, retries included.
func WithTimeout(d time.Duration) ClientOption {
	return func(c *clientConfig) { c.timeout = d }
}

// WithRetries sets how many times a request is retried after a 503, a
// timeout or no responders (default 3; 0 disables retries). 400, 404 and 500
// replies are returned at once.
func WithRetries(n int) ClientOption {
	return func(c *clientConfig) { c.retries = n }
}

// WithBackoff sets the wait before the first retry and its cap (defaults
// 20ms and 1s). The wait doubles with every retry and is jittered down to
// half its length, so clients turned away together do not return together.
func WithBackoff(min, max time.Duration) ClientOption {
	return func(c *clientConfig) { c.backoffMin, c.backoffMax = min, max }
}

// WithMaxBatch sets the largest count one request may ask for (default
// 10000, the workers' LEAF_MAX_BATCH). Larger counts are refused locally.
func WithMaxBatch(n int) ClientOption {
	return func(c *clientConfig) { c.maxBatch = n }
}

// WithPrefetch makes Next serve IDs from a local buffer: when it holds
// lowWater IDs or fewer, one background request asks for size more, so
// Next does not touch the network while the service keeps up. size is at
// most 16 max batches (a larger buffer is refilled by requests of the max
// batch sent at once); lowWater is below size.
//
// Prefetched IDs are taken before they are used: IDs in the buffer when the
// process exits are never vended again, and snowflake IDs are as old as
// their refill.
func WithPrefetch(size, lowWater int) ClientOption {
	return func(c *clientConfig) { c.prefetch, c.lowWater = size, lowWater }
}

func (c *clientConfig) validate() error {
	switch {
	case ValidatePrefix(c.prefix) != nil:
		return fmt.Errorf("vending: %w", ValidatePrefix(c.prefix))
	case c.timeout <= 0:
		return fmt.Errorf("vending: request timeout %v must be positive", c.timeout)
	case c.retries < 0:
		return fmt.Errorf("vending: retries %d must be 0 or more", c.retries)
	case c.backoffMin <= 0 || c.backoffMax < c.backoffMin:
		return fmt.Errorf("vending: backoff %v..%v must be positive and ascending", c.backoffMin, c.backoffMax)
	case c.maxBatch < 1:
		return fmt.Errorf("vending: max batch %d must be at least 1", c.maxBatch)
	case c.prefetch < 0 || c.prefetch > maxPrefetchBatches*c.maxBatch:
		return fmt.Errorf("vending: prefetch size %d must be from 1 to %d max batches (%d)", c.prefetch, maxPrefetchBatches, maxPrefetchBatches*c.maxBatch)
	case c.prefetch > 0 && (c.lowWater < 0 || c.lowWater >= c.prefetch):
		return fmt.Errorf("vending: prefetch low-water mark %d must be from 0 to below the size %d", c.lowWater, c.prefetch)
	}
	return nil
}

// Client takes IDs from the leaf service over NATS. Its Next and NextN
// serve snowflake IDs; Segment returns a Source for a segment tag. It is
// safe for concurrent use. Close it to stop its prefetch goroutines.
type Client struct {
	nc  *nats.Conn
	cfg clientConfig
	sf  *Source

	mu       sync.Mutex
	segments map[string]*Source
	closed   bool
}

// NewClient returns a client that sends its requests on nc. It does not
// contact the service until the first request.
func NewClient(nc *nats.Conn, opts ...ClientOption) (*Client, error) {
	if nc == nil {
		return nil, errors.New("vending: NewClient needs a NATS connection, got nil")
	}
	cfg := clientConfig{
		prefix:     DefaultPrefix,
		timeout:    DefaultClientTimeout,
		retries:    DefaultRetries,
		backoffMin: DefaultBackoffMin,
		backoffMax: DefaultBackoffMax,
		maxBatch:   DefaultMaxBatch,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{nc: nc, cfg: cfg, segments: map[string]*Source{}}
	c.sf = c.newSource(cfg.prefix + ".snowflake")
	return c, nil
}

// Next returns one snowflake ID.
func (c *Client) Next(ctx context.Context) (int64, error) { return c.sf.Next(ctx) }

// NextN returns n snowflake IDs, ascending when they come from one reply.
func (c *Client) NextN(ctx context.Context, n int) ([]int64, error) { return c.sf.NextN(ctx, n) }

// Snowflake returns the source of snowflake IDs, the one Next uses.
func (c *Client) Snowflake() *Source { return c.sf }

// Segment returns the source of IDs for a segment tag. Calls with the same
// tag return the same Source, so they share its prefetch buffer.
func (c *Client) Segment(tag string) (*Source, error) {
	if err := segment.ValidateTag(tag); err != nil {
		return nil, fmt.Errorf("vending: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClientClosed
	}
	s := c.segments[tag]
	if s == nil {
		s = c.newSource(c.cfg.prefix + ".segment." + tag)
		c.segments[tag] = s
	}
	return s, nil
}

// Close stops the prefetch goroutines and waits for them. IDs left in the
// buffers are dropped. Calls after Close return ErrClientClosed; the NATS
// connection stays open.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	sources := make([]*Source, 0, len(c.segments)+1)
	sources = append(sources, c.sf)
	for _, s := range c.segments {
		sources = append(sources, s)
	}
	c.mu.Unlock()
	for _, s := range sources {
		s.close()
	}
	return nil
}

// Source is one kind of ID: snowflake, or one segment tag. It is safe for
// concurrent use.
type Source struct {
	c       *Client
	subject string
	pf      *prefetcher // nil without prefetch

	ctx    context.Context // cancelled by close; ends requests in flight
	cancel context.CancelFunc
}

func (c *Client) newSource(subject string) *Source {
	s := &Source{c: c, subject: subject}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if c.cfg.prefetch > 0 {
		s.pf = newPrefetcher(s)
	}
	return s
}

func (s *Source) close() {
	s.cancel()
	if s.pf != nil {
		s.pf.close()
	}
}

// Subject is the subject s sends its requests to.
func (s *Source) Subject() string { return s.subject }

// Next returns one ID. With prefetch it comes from the buffer and the call
// touches the network only when the buffer is empty.
func (s *Source) Next(ctx context.Context) (int64, error) {
	if s.pf != nil {
		return s.pf.next(ctx)
	}
	var one [1]int64
	ids, err := s.request(ctx, one[:0], 1)
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// NextN returns n IDs, 1 <= n <= the max batch. With prefetch they come
// from the buffer when it holds n, else from a request of their own.
func (s *Source) NextN(ctx context.Context, n int) ([]int64, error) {
	if n < 1 || n > s.c.cfg.maxBatch {
		return nil, fmt.Errorf("%w: asked for %d IDs; ask for 1 to %d per call (the max batch)", ErrBadRequest, n, s.c.cfg.maxBatch)
	}
	if s.pf != nil {
		if ids := s.pf.take(n); ids != nil {
			return ids, nil
		}
	}
	return s.request(ctx, make([]int64, 0, n), n)
}

// request asks for n IDs, appends them to dst and retries what a retry can
// fix: 503s, timeouts and no responders.
func (s *Source) request(ctx context.Context, dst []int64, n int) ([]int64, error) {
	cfg := &s.c.cfg
	msg := &nats.Msg{Subject: s.subject}
	if n > 1 {
		msg.Data = strconv.AppendInt(nil, int64(n), 10)
	}
	binary := n >= binaryFrom
	if binary {
		msg.Header = nats.Header{EncodingHeader: []string{EncodingBinary}}
	}
	backoff := cfg.backoffMin
	for attempt := 0; ; attempt++ {
		if err := s.ctx.Err(); err != nil {
			return dst, ErrClientClosed
		}
		ids, err := s.attempt(ctx, dst, msg, n, binary)
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return ids, err
		}
		if attempt == cfg.retries {
			if errors.Is(err, ErrUnavailable) {
				return dst, err
			}
			return dst, fmt.Errorf("%w: %s: no reply in %d attempts of %v: %w", ErrUnavailable, s.subject, attempt+1, cfg.timeout, err)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, cfg.backoffMax)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return dst, ctx.Err()
		case <-s.ctx.Done():
			t.Stop()
			return dst, ErrClientClosed
		}
	}
}

// attempt sends one request and decodes its reply.
func (s *Source) attempt(ctx context.Context, dst []int64, msg *nats.Msg, n int, binary bool) ([]int64, error) {
	actx, cancel := context.WithTimeout(ctx, s.c.cfg.timeout)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	reply, err := s.c.nc.RequestMsgWithContext(actx, msg)
	if err != nil {
		if s.ctx.Err() != nil {
			return dst, ErrClientClosed
		}
		if ctx.Err() != nil {
			return dst, ctx.Err()
		}
		return dst, fmt.Errorf("vending: %s: %w", s.subject, err)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		c, _ := strconv.Atoi(code)
		return dst, &Error{Code: c, Message: reply.Header.Get(micro.ErrorHeader)}
	}
	before := len(dst)
	if binary {
		dst, err = DecodeBinary(dst, reply.Data)
	} else {
		dst, err = DecodeText(dst, reply.Data)
	}
	if err == nil && len(dst)-before != n {
		err = fmt.Errorf("%w: asked %s for %d IDs, got %d", ErrBadReply, s.subject, n, len(dst)-before)
	}
	if err != nil {
		return dst[:before], err
	}
	return dst, nil
}

func retryable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded)
}

// prefetcher is a Source's buffer. Callers take IDs from cur under mu; one
// goroutine, run, fills ready while they do, so the switch from cur to ready
// is a swap of slices. Both are pointer-free []int64, and the exhausted one
// is handed back for the next refill to decode into, so a steady state
// allocates nothing per ID.
type prefetcher struct {
	src      *Source
	size     int
	lowWater int

	mu     sync.Mutex
	cur    []int64 // cur[pos:] are the IDs not yet taken
	pos    int
	ready  []int64 // the last refill, taken when cur is empty
	spare  []int64 // an exhausted buffer to refill into
	asked  bool    // a refill is requested or in flight
	err    error   // the last refill's error, returned when the buffer is empty
	filled chan struct{}
	closed bool

	wake chan struct{} // asks run for a refill; capacity 1
	stop chan struct{}
	done chan struct{}
}

func newPrefetcher(s *Source) *prefetcher {
	p := &prefetcher{
		src:      s,
		size:     s.c.cfg.prefetch,
		lowWater: s.c.cfg.lowWater,
		filled:   make(chan struct{}),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go p.run()
	return p
}

// held is how many IDs the buffer holds. Called with mu held.
func (p *prefetcher) held() int { return len(p.cur) - p.pos + len(p.ready) }

// next is the hot path: a lock, an index and, below the low-water mark, a
// flag and a non-blocking send.
func (p *prefetcher) next(ctx context.Context) (int64, error) {
	p.mu.Lock()
	for {
		if p.pos == len(p.cur) && len(p.ready) > 0 {
			p.swap()
		}
		if p.pos < len(p.cur) && !p.closed {
			id := p.cur[p.pos]
			p.pos++
			if p.held() <= p.lowWater {
				p.ask()
			}
			p.mu.Unlock()
			return id, nil
		}
		if err := p.wait(ctx); err != nil {
			p.mu.Unlock()
			return 0, err
		}
	}
}

// take returns n IDs from the buffer, or nil if it holds fewer.
func (p *prefetcher) take(n int) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held() < n || p.closed {
		p.ask()
		return nil
	}
	ids := make([]int64, 0, n)
	for len(ids) < n {
		if p.pos == len(p.cur) {
			p.swap()
		}
		k := min(n-len(ids), len(p.cur)-p.pos)
		ids = append(ids, p.cur[p.pos:p.pos+k]...)
		p.pos += k
	}
	if p.held() <= p.lowWater {
		p.ask()
	}
	return ids
}

// swap makes the refilled buffer current and keeps the exhausted one.
// Called with mu held.
func (p *prefetcher) swap() {
	if cap(p.cur) >= p.size {
		p.spare = p.cur[:0]
	}
	p.cur, p.pos, p.ready = p.ready, 0, nil
}

// ask requests a refill unless one is under way, ready is still full or an
// error waits to be returned. Called with mu held.
func (p *prefetcher) ask() {
	if p.asked || p.ready != nil || p.err != nil || p.closed {
		return
	}
	p.asked = true
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// wait, with the buffer empty and mu held, returns the refill's error if
// there is one, else waits for the refill. It returns with mu held.
func (p *prefetcher) wait(ctx context.Context) error {
	if p.closed {
		return ErrClientClosed
	}
	if err := p.err; err != nil {
		p.err = nil // one caller reports it; the next call refills anew
		return err
	}
	p.ask()
	filled := p.filled
	p.mu.Unlock()
	defer p.mu.Lock()
	select {
	case <-filled:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.stop:
		return ErrClientClosed
	}
}

// run is the refill goroutine: one request at a time, on demand.
func (p *prefetcher) run() {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
		}
		p.mu.Lock()
		buf := p.spare
		p.spare = nil
		p.mu.Unlock()
		if buf == nil {
			buf = make([]int64, 0, p.size)
		}
		ids, err := p.refill(buf)
		p.mu.Lock()
		if err != nil {
			p.err = fmt.Errorf("vending: prefetch from %s: %w", p.src.subject, err)
			p.spare = buf
		} else {
			p.ready = ids
		}
		p.asked = false
		close(p.filled)
		p.filled = make(chan struct{})
		p.mu.Unlock()
	}
}

// refill fills buf with size IDs: one request, or for a buffer larger than
// the max batch, requests of the max batch in parallel, so the refill takes
// one round trip whatever the size. Each request decodes into its own part
// of buf, so the parts join without copying.
func (p *prefetcher) refill(buf []int64) ([]int64, error) {
	batch := p.src.c.cfg.maxBatch
	if p.size <= batch {
		return p.src.request(p.src.ctx, buf, p.size)
	}
	buf = buf[:p.size]
	errs := make([]error, (p.size+batch-1)/batch)
	var wg sync.WaitGroup
	for i := range errs {
		lo := i * batch
		hi := min(lo+batch, p.size)
		wg.Go(func() {
			part, err := p.src.request(p.src.ctx, buf[lo:lo:hi], hi-lo)
			if err == nil && (len(part) != hi-lo || &part[0] != &buf[lo]) {
				err = fmt.Errorf("%w: refill part of %d IDs", ErrBadReply, len(part))
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return buf[:0], err
	}
	return buf, nil
}

func (p *prefetcher) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	<-p.done
}
