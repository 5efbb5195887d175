package vending

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/backoff"
	"github.com/leaf-nats/leaf/segment"
)

// Client takes IDs from the leaf service over NATS. Its Next and NextN
// serve snowflake IDs; Segment returns a Source for a segment tag. It is
// safe for concurrent use. Close it to stop its prefetch goroutines.
type Client struct {
	nc  *nats.Conn
	cfg ClientConfig
	sf  *Source

	mu       sync.Mutex
	segments map[string]*Source
	closed   bool
}

// NewClient returns a client that sends its requests on nc, configured by
// c (the zero ClientConfig gives every default). It does not contact the
// service until the first request.
func NewClient(nc *nats.Conn, c ClientConfig) (*Client, error) {
	if nc == nil {
		return nil, errors.New("vending: NewClient needs a NATS connection, got nil")
	}
	cfg, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	cl := &Client{nc: nc, cfg: cfg, segments: map[string]*Source{}}
	cl.sf = cl.newSource(cfg.Prefix+".snowflake", cfg.MaxBatch)
	return cl, nil
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
		s = c.newSource(c.cfg.Prefix+".segment."+tag, c.cfg.MaxRangeBatch)
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
	limit   int64       // the most IDs one request may ask for
	pf      *prefetcher // nil without prefetch
	// strict is set while the tag's replies say it is strict: calls then
	// bypass pf, since IDs buffered are behind IDs other consumers take.
	strict atomic.Bool

	ctx    context.Context // cancelled by close; ends requests in flight
	cancel context.CancelFunc
}

func (c *Client) newSource(subject string, limit int) *Source {
	s := &Source{c: c, subject: subject, limit: int64(limit)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if c.cfg.Prefetch > 0 {
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

// Next returns one ID. With prefetch it comes from the buffer, with no lock
// (an atomic add), and the call touches the network only when the buffer
// is empty; from one goroutine, IDs from one vendor ascend.
func (s *Source) Next(ctx context.Context) (int64, error) {
	if s.pf != nil && !s.strict.Load() {
		if id, err := s.pf.next(ctx); err != errStrict {
			return id, err
		}
	}
	var one [1]ids.Range
	rs, err := s.request(ctx, one[:0], 1)
	if err != nil {
		return 0, err
	}
	return rs[0].First, nil
}

// NextN returns n IDs, 1 <= n <= the max batch. With prefetch they come
// from the buffer, else from a request of their own.
func (s *Source) NextN(ctx context.Context, n int) ([]int64, error) {
	if n < 1 || n > s.c.cfg.MaxBatch {
		return nil, fmt.Errorf("%w: asked for %d IDs; ask for 1 to %d per call (the max batch)", ErrBadRequest, n, s.c.cfg.MaxBatch)
	}
	b, err := s.Block(ctx, int64(n))
	if err != nil {
		return nil, err
	}
	ids := make([]int64, 0, n)
	for id, ok := b.Next(); ok; id, ok = b.Next() {
		ids = append(ids, id)
	}
	return ids, nil
}

// NextRanges returns n IDs as runs of consecutive IDs, from one request in
// the ranges encoding: a batch of any size is a few bytes on the wire. n
// may be up to the service's max range batch for a segment tag, the max
// batch for snowflake IDs. It does not use the prefetch buffer.
func (s *Source) NextRanges(ctx context.Context, n int64) ([]ids.Range, error) {
	if n < 1 || n > s.limit {
		return nil, fmt.Errorf("%w: asked for %d IDs; ask for 1 to %d per request", ErrBadRequest, n, s.limit)
	}
	return s.request(ctx, nil, n)
}

// Block returns n IDs for one goroutine to hand out with Block.Next, which
// takes no lock and no atomic: the way to scale with goroutines. With
// prefetch they come from the buffer (one atomic add for the whole block)
// when n is at most its size, else from a request of their own.
func (s *Source) Block(ctx context.Context, n int64) (Block, error) {
	if n < 1 || n > s.limit {
		return Block{}, fmt.Errorf("%w: asked for %d IDs; ask for 1 to %d per block", ErrBadRequest, n, s.limit)
	}
	if s.pf != nil && n <= s.pf.size.Load() && !s.strict.Load() {
		if b, err := s.pf.block(ctx, n); err != errStrict {
			return b, err
		}
	}
	rs, err := s.request(ctx, nil, n)
	if err != nil {
		return Block{}, err
	}
	return newBlock(rs), nil
}

var rangesEncoding = []string{EncodingRanges}

// request asks for n IDs in the ranges encoding, appends their runs to dst
// and retries what a retry can fix: 503s, 429s, timeouts and no responders.
func (s *Source) request(ctx context.Context, dst []ids.Range, n int64) ([]ids.Range, error) {
	cfg := &s.c.cfg
	// One ID is as short in text, the default, which spares both ends a
	// header; more travel as ranges, a few bytes for any batch.
	msg := &nats.Msg{Subject: s.subject}
	if n > 1 {
		msg.Header = nats.Header{EncodingHeader: rangesEncoding}
		msg.Data = strconv.AppendInt(nil, n, 10)
	}
	b := backoff.Backoff{Min: cfg.BackoffMin, Max: cfg.BackoffMax}
	for attempt := 0; ; attempt++ {
		if err := s.ctx.Err(); err != nil {
			return dst, ErrClientClosed
		}
		rs, err := s.attempt(ctx, dst, msg, n)
		var e *Error
		throttled := errors.As(err, &e) && e.Code == CodeTooManyRequests
		if err == nil || !retryable(err) || ctx.Err() != nil || throttled && e.MaxCount > 0 && n > e.MaxCount {
			return rs, err // a batch above the limit's burst is never served
		}
		if attempt == cfg.Retries {
			if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTooManyRequests) {
				return dst, err
			}
			hint := ""
			if errors.Is(err, nats.ErrNoResponders) {
				hint = " (no vendor subscribes to " + s.subject + ": is one running on this NATS, with this subject prefix, and may this user reach it?)"
			}
			return dst, fmt.Errorf("%w: %s: no reply in %d attempts of %v: %w%s", ErrUnavailable, s.subject, attempt+1, cfg.Timeout, err, hint)
		}
		d := b.Next()
		wait := d/2 + rand.N(d/2+1) // jitter, so that clients turned away together come back apart
		if throttled && e.RetryAfter > 0 {
			// The vendor said when: asking sooner is refused again.
			wait = e.RetryAfter + rand.N(e.RetryAfter/8+1)
		}
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
func (s *Source) attempt(ctx context.Context, dst []ids.Range, msg *nats.Msg, n int64) ([]ids.Range, error) {
	actx, cancel := context.WithTimeout(ctx, s.c.cfg.Timeout)
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
	if reply.Header.Get(micro.ErrorCodeHeader) != "" {
		return dst, replyError(reply.Header)
	}
	s.setStrict(reply.Header.Get(StrictHeader) == "true")
	before := len(dst)
	if reply.Header.Get(EncodingHeader) == EncodingRanges {
		dst, err = DecodeRanges(dst, reply.Data)
	} else { // one ID, or a vendor that predates ranges
		dst, err = decodeTextRanges(dst, reply.Data)
	}
	if got := ids.Count(dst[before:]); err == nil && got != n {
		err = fmt.Errorf("%w: asked %s for %d IDs, got %d", ErrBadReply, s.subject, n, got)
	}
	if err != nil {
		return dst[:before], err
	}
	return dst, nil
}

// setStrict records whether the tag is strict, as its last reply said. The
// prefetch buffer's IDs are dropped when it becomes so: they are behind IDs
// other consumers take from now on.
func (s *Source) setStrict(strict bool) {
	if !strict {
		s.strict.Store(false)
		return
	}
	if !s.strict.Swap(true) && s.pf != nil {
		s.pf.drop()
	}
}

func retryable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTooManyRequests) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded)
}

// Decode asks a vendor (<prefix>.snowflake.decode) for the parts of a
// snowflake ID: the vendor reads it in its own epoch and layout, and the
// reply's Layout says which layout that is.
func (c *Client) Decode(ctx context.Context, id int64) (Decoded, error) {
	actx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	subject := c.cfg.Prefix + ".snowflake.decode"
	reply, err := c.nc.RequestWithContext(actx, subject, strconv.AppendInt(nil, id, 10))
	if err != nil {
		if ctx.Err() != nil {
			return Decoded{}, ctx.Err()
		}
		return Decoded{}, fmt.Errorf("vending: %s: %w", subject, err)
	}
	if reply.Header.Get(micro.ErrorCodeHeader) != "" {
		return Decoded{}, replyError(reply.Header)
	}
	var d Decoded
	if err := json.Unmarshal(reply.Data, &d); err != nil || d.ID != strconv.FormatInt(id, 10) {
		return Decoded{}, fmt.Errorf("%w: %s answered %q for ID %d", ErrBadReply, subject, reply.Data, id)
	}
	return d, nil
}
