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
	cl.sf = cl.newSource(cfg.Prefix + ".snowflake")
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
		s = c.newSource(c.cfg.Prefix + ".segment." + tag)
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
	if n < 1 || n > s.c.cfg.MaxBatch {
		return nil, fmt.Errorf("%w: asked for %d IDs; ask for 1 to %d per call (the max batch)", ErrBadRequest, n, s.c.cfg.MaxBatch)
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
	backoff := cfg.BackoffMin
	for attempt := 0; ; attempt++ {
		if err := s.ctx.Err(); err != nil {
			return dst, ErrClientClosed
		}
		ids, err := s.attempt(ctx, dst, msg, n, binary)
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return ids, err
		}
		if attempt == cfg.Retries {
			if errors.Is(err, ErrUnavailable) {
				return dst, err
			}
			return dst, fmt.Errorf("%w: %s: no reply in %d attempts of %v: %w", ErrUnavailable, s.subject, attempt+1, cfg.Timeout, err)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, cfg.BackoffMax)
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
