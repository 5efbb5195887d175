package vending

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/strict"
)

// DefaultForwardTimeout bounds a strict tag's request forwarded to its
// leader: the segment wait, so that the client's 503 arrives within its
// own time-out.
const DefaultForwardTimeout = 500 * time.Millisecond

// StrictSubject is the subject on which a strict tag's leader takes the
// requests the other vendors forward to it: <prefix>.strict.<tag>. Only
// vendors publish there.
func StrictSubject(prefix, tag string) string { return prefix + ".strict." + tag }

// ForwarderConfig configures a Forwarder. The zero value of every field but
// Gate means its default, as in Config.
type ForwarderConfig struct {
	// Prefix and QueueGroup are the service's (Config).
	Prefix, QueueGroup string
	// MaxCount is the largest count a forwarded request may carry: the
	// service's MaxRangeBatch, since a forward asks in ranges. Default
	// DefaultMaxRangeBatch.
	MaxCount int
	// ReplyPrefixes and OwnInboxes decide which reply subjects a leader
	// answers, as in Config.
	ReplyPrefixes, OwnInboxes []string
	// Timeout bounds a forwarded request. Default DefaultForwardTimeout.
	Timeout time.Duration
	// Gate, when set, says why this vendor may not serve segments now
	// (nil: it may); a leader answers forwarded requests past it.
	Gate func() error
	// Observer is told of dropped requests.
	Observer Observer
	// Logger receives the replies that could not be sent.
	Logger *slog.Logger
}

func (c ForwarderConfig) withDefaults() (ForwarderConfig, error) {
	c.Prefix = cmpOr(c.Prefix, DefaultPrefix)
	c.QueueGroup = cmpOr(c.QueueGroup, DefaultQueueGroup)
	if c.MaxCount == 0 {
		c.MaxCount = DefaultMaxRangeBatch
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultForwardTimeout
	}
	if len(c.ReplyPrefixes) == 0 {
		c.ReplyPrefixes = DefaultReplyPrefixes
	}
	if c.Gate == nil {
		c.Gate = func() error { return nil }
	}
	if c.Observer == nil {
		c.Observer = noObserver{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if c.MaxCount < 1 {
		errs = append(errs, fmt.Errorf("max count %d must be at least 1", c.MaxCount))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v is negative", c.Timeout))
	}
	if err := ValidatePrefix(c.Prefix); err != nil {
		errs = append(errs, err)
	}
	for _, p := range c.ReplyPrefixes {
		if err := CheckReplyPrefix(p, c.Prefix); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("vending: forwarder: %w", err)
	}
	return c, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Forwarder carries strict tags' requests between vendors (package strict):
// a vendor that does not lead a tag asks its leader with Forward, and the
// leader answers on the subscriptions Listen makes. It is
// strict.Config.Forward and strict.Config.Listen.
type Forwarder struct {
	nc      *nats.Conn
	cfg     ForwarderConfig
	replies *Replies

	ctx    context.Context // cancelled by Close: bounds the serves in flight
	cancel context.CancelFunc

	mu     sync.Mutex // orders wg.Add and subscriptions against Close
	closed bool
	subs   map[*nats.Subscription]struct{}
	wg     sync.WaitGroup
}

// OpenForwarder returns a Forwarder on nc, the service's connection.
func OpenForwarder(nc *nats.Conn, c ForwarderConfig) (*Forwarder, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	f := &Forwarder{nc: nc, cfg: c, subs: map[*nats.Subscription]struct{}{},
		replies: NewReplies(c.ReplyPrefixes, c.OwnInboxes)}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	return f, nil
}

// Close stops listening for every tag and waits for the forwarded requests
// being served (each bounded by the forward time-out).
func (f *Forwarder) Close(context.Context) error {
	f.mu.Lock()
	f.closed = true
	subs := f.subs
	f.subs = nil
	f.mu.Unlock()
	var errs []error
	for sub := range subs {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
	}
	f.wg.Wait()
	f.cancel()
	return errors.Join(errs...)
}

var forwardHeader = nats.Header{EncodingHeader: {EncodingRanges}}

// notStrictHeader marks a leader's answer that the tag is normal again, so
// that the vendor that forwarded the request serves it the normal way.
const notStrictHeader = "Leaf-Not-Strict"

// Forward asks the leader of tag for n IDs. It fails with strict.ErrNoLeader
// when no vendor listens as its leader, or the one that does is too slow to
// answer (frozen, or cut off): the caller then tries to take the lead,
// which the lease decides.
func (f *Forwarder) Forward(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	msg := &nats.Msg{Subject: StrictSubject(f.cfg.Prefix, tag), Header: forwardHeader, Data: strconv.AppendInt(nil, n, 10)}
	reply, err := f.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return dst, fmt.Errorf("%w: %s: %w", strict.ErrNoLeader, msg.Subject, err)
	case err != nil:
		return dst, fmt.Errorf("%w: forward to the leader of %q: %w", segment.ErrUnavailable, tag, err)
	}
	if reply.Header.Get(notStrictHeader) != "" {
		// Normal again: the caller takes the IDs the normal way.
		return dst, fmt.Errorf("%w: tag %q, as its leader found", segment.ErrNotStrict, tag)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		c, _ := strconv.Atoi(code)
		return dst, &Error{Code: c, Message: "the leader of the strict tag: " + reply.Header.Get(micro.ErrorHeader)}
	}
	rs, err := DecodeRanges(dst, reply.Data)
	if got := ids.Count(rs[len(dst):]); err != nil || got != n {
		return dst, fmt.Errorf("%w: the leader of %q answered %d IDs for %d: %v", segment.ErrUnavailable, tag, got, n, err)
	}
	return rs, nil
}

// Listen answers the requests forwarded to this vendor as tag's leader,
// from ls, until stop is called or the Forwarder closes. Requests it can
// serve from memory are answered on the subscription's goroutine, in
// order; those that wait for the store in goroutines of their own.
func (f *Forwarder) Listen(tag string, ls *strict.Leaders) (stop func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("%w: closing", segment.ErrUnavailable)
	}
	sub, err := f.nc.QueueSubscribe(StrictSubject(f.cfg.Prefix, tag), f.cfg.QueueGroup, func(m *nats.Msg) { f.serve(tag, ls, m) })
	if err != nil {
		return nil, err
	}
	// The subscription is known to the server before the lead serves, so
	// that no forwarded request finds no responders meanwhile.
	if err := f.nc.Flush(); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	f.subs[sub] = struct{}{}
	return func() {
		f.mu.Lock()
		_, ours := f.subs[sub]
		delete(f.subs, sub)
		f.mu.Unlock()
		if ours {
			sub.Unsubscribe()
		}
	}, nil
}

// serve answers one forwarded request: within the configured count, past
// the gate, to an inbox only.
func (f *Forwarder) serve(tag string, ls *strict.Leaders, m *nats.Msg) {
	if why := f.replies.Why(m.Reply); why != "" {
		f.cfg.Observer.Dropped(ModeSegment, why)
		f.replies.Drop(f.cfg.Logger, m.Subject, m.Reply, why)
		return
	}
	c, err := ParseCount(m.Data, f.cfg.MaxCount)
	n := int64(c)
	if err == nil {
		err = f.cfg.Gate()
	}
	if err != nil {
		f.respond(m, nil, err)
		return
	}
	rs, ok, err := ls.TryTake(tag, nil, n)
	if ok || err != nil {
		f.respond(m, rs, err)
		return
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		f.respond(m, nil, fmt.Errorf("%w: this vendor is stopping", segment.ErrUnavailable))
		return
	}
	f.wg.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.wg.Done()
		ctx, cancel := context.WithTimeout(f.ctx, f.cfg.Timeout)
		defer cancel()
		rs, err := ls.Serve(ctx, tag, nil, n)
		f.respond(m, rs, err)
	}()
}

// respond answers a forwarded request with rs, or with err as the service
// would: its code and sentence.
func (f *Forwarder) respond(m *nats.Msg, rs []ids.Range, err error) {
	r := &nats.Msg{Subject: m.Reply}
	if err != nil {
		if errors.Is(err, strict.ErrNotLeader) {
			err = fmt.Errorf("%w: %w; ask again", segment.ErrUnavailable, err)
		}
		r.Header = nats.Header{}
		r.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(Code(err)))
		r.Header.Set(micro.ErrorHeader, err.Error())
		if errors.Is(err, segment.ErrNotStrict) {
			r.Header.Set(notStrictHeader, "true")
		}
	} else {
		r.Header = forwardHeader
		r.Data = AppendRanges(nil, rs)
	}
	if err := f.nc.PublishMsg(r); err != nil {
		f.cfg.Logger.Warn("answering a forwarded strict request", "subject", m.Subject, "err", err)
	}
}
