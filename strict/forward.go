package strict

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/inflight"
	"github.com/leaf-nats/leaf/internal/natsperm"
	"github.com/leaf-nats/leaf/lease"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/vending"
)

// DefaultForwardTimeout bounds a strict tag's request forwarded to its
// leader: the segment wait, so that the client's 503 arrives within its
// own time-out.
const DefaultForwardTimeout = 500 * time.Millisecond

// DefaultReprobe is ForwarderConfig.Reprobe's default.
const DefaultReprobe = 30 * time.Second

// StrictSubject is the subject on which a strict tag's leader takes the
// requests the other vendors forward to it: <prefix>.strict.<tag>. Only
// vendors publish there.
func StrictSubject(prefix, tag string) string { return prefix + ".strict." + tag }

// GoneSubject is where a strict tag's leader says it stepped down (the body
// is the tag), so that the vendors that hand it requests stop at once:
// <prefix>.peers.strict. Only vendors publish there.
func GoneSubject(prefix string) string { return prefix + ".peers.strict" }

// ForwarderConfig configures a Forwarder. The zero value of every field but
// Gate means its default, as in Config.
type ForwarderConfig struct {
	// Prefix and QueueGroup are the service's (Config).
	Prefix, QueueGroup string
	// MaxCount is the largest count a forwarded request may carry: the
	// service's MaxRangeBatch, since a forward asks in ranges. Default
	// vending.DefaultMaxRangeBatch.
	MaxCount int
	// MaxBatch is the service's MaxBatch, the largest count of a request
	// handed off in the text or binary encoding (a ranges one may ask for
	// MaxCount). Default vending.DefaultMaxBatch.
	MaxBatch int
	// ReplyPrefixes and OwnInboxes decide which reply subjects a leader
	// answers, as in Config.
	ReplyPrefixes, OwnInboxes []string
	// Timeout bounds a forwarded request. Default DefaultForwardTimeout.
	Timeout time.Duration
	// Reprobe is how often a Forwarder that may not answer clients
	// directly checks again whether it may (permissions change at run
	// time). Default DefaultReprobe.
	Reprobe time.Duration
	// Gate, when set, says why this vendor may not serve segments now; a
	// leader answers forwarded requests past it.
	Gate Gate
	// Observer is told of dropped requests.
	Observer vending.Observer
	// Clock spaces the probes and times the requests a leader answers.
	// Nil: the system's.
	Clock lease.Nower
	// Logger receives the replies that could not be sent.
	Logger *slog.Logger
}

func (c ForwarderConfig) withDefaults() (ForwarderConfig, error) {
	c.Prefix = cmp.Or(c.Prefix, vending.DefaultPrefix)
	c.QueueGroup = cmp.Or(c.QueueGroup, vending.DefaultQueueGroup)
	if c.MaxCount == 0 {
		c.MaxCount = vending.DefaultMaxRangeBatch
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = vending.DefaultMaxBatch
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultForwardTimeout
	}
	if c.Reprobe == 0 {
		c.Reprobe = DefaultReprobe
	}
	if len(c.ReplyPrefixes) == 0 {
		c.ReplyPrefixes = vending.DefaultReplyPrefixes
	}
	if c.Gate == nil {
		c.Gate = open{}
	}
	if c.Observer == nil {
		c.Observer = discard{}
	}
	if c.Clock == nil {
		c.Clock = lease.Timers(nil)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if c.MaxCount < 1 || c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("max count %d and max batch %d must be at least 1", c.MaxCount, c.MaxBatch))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v is negative", c.Timeout))
	}
	if err := vending.ValidatePrefix(c.Prefix); err != nil {
		errs = append(errs, err)
	}
	for _, p := range c.ReplyPrefixes {
		if err := vending.CheckReplyPrefix(p, c.Prefix); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("vending: forwarder: %w", err)
	}
	return c, nil
}

// Forwarder carries strict tags' requests between vendors (package strict):
// a vendor that does not lead a tag asks its leader with Forward, and the
// leader answers on the subscriptions Listen makes. It is
// strict.Config.Forward and strict.Config.Listen.
type Forwarder struct {
	nc      *nats.Conn
	cfg     ForwarderConfig
	replies *vending.Replies
	// direct: this vendor's NATS user may publish to the clients' reply
	// subjects, so as a leader it takes handed-off requests. Checked at
	// start (mayAnswerClients), turned off when NATS refuses an answer
	// (noteDenied), checked again every Reprobe while off.
	direct   atomic.Bool
	probing  atomic.Bool
	probedAt atomic.Int64 // Unix ns of the last check
	deniedMu sync.Mutex
	seen     natsperm.Since // the connection's errors noteDenied looked at

	// lostPrefix is the inbox on which NATS says that a handed-off request
	// found no leader listening (the handoff's own reply subject is it
	// followed by the client's).
	lostPrefix string

	ctx    context.Context // cancelled by Close: bounds the serves in flight
	cancel context.CancelFunc

	// serving are the probes and the serves that wait for the store;
	// Close stops it before it takes subs, so that no subscription is
	// added after.
	serving inflight.Group
	mu      sync.Mutex // guards subs
	subs    map[*nats.Subscription]struct{}
}

// OpenForwarder returns a Forwarder on nc, the service's connection.
func OpenForwarder(nc *nats.Conn, c ForwarderConfig) (*Forwarder, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	f := &Forwarder{nc: nc, cfg: c, subs: map[*nats.Subscription]struct{}{},
		replies: vending.NewReplies(c.ReplyPrefixes, c.OwnInboxes), lostPrefix: nc.NewInbox() + "."}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.probe()
	return f, nil
}

// probe checks whether this vendor may answer clients directly, and says
// so when that changes (or, at the start, when it may not).
func (f *Forwarder) probe() {
	ok, first := f.mayAnswerClients(), f.probedAt.Load() == 0
	f.probedAt.Store(f.cfg.Clock.Now().UnixNano())
	f.deniedMu.Lock()
	f.seen = natsperm.Now(f.nc) // the probe's own refusals are no news for noteDenied
	f.deniedMu.Unlock()
	switch was := f.direct.Swap(ok); {
	case ok && !was && !first:
		f.cfg.Logger.Info("strict tags: this vendor's NATS user may answer clients directly again: it takes handed-off requests as a leader")
	case !ok && (was || first):
		f.cfg.Logger.Info("strict tags: this vendor's NATS user may answer clients only on the reply subjects of requests it received (allow_responses), so when it leads a strict tag "+
			"the other vendors forward the tag's requests to it rather than hand them over, which costs a strict tag about half its speed "+
			"with three vendors: grant the vendors' user publish on the reply prefixes (LEAF_REPLY_PREFIXES; docs/security.md)",
			"reply_prefixes", f.cfg.ReplyPrefixes, "checks_again_every", f.cfg.Reprobe)
	}
}

// reprobe checks again, in the background, once Reprobe has passed since
// the last check while this vendor may not answer clients directly.
func (f *Forwarder) reprobe() {
	if f.direct.Load() || f.cfg.Clock.Now().Sub(time.Unix(0, f.probedAt.Load())) < f.cfg.Reprobe || !f.probing.CompareAndSwap(false, true) {
		return
	}
	if !f.serving.Go(func() {
		defer f.probing.Store(false)
		f.probe()
	}) {
		f.probing.Store(false)
	}
}

// noteDenied turns direct answers off when NATS refused one: this vendor's
// permissions changed since it checked (a reload, or a reconnect to a
// server configured otherwise). The other vendors learn it from its next
// answer to a forward, and forward again. The refusal reaches the
// connection after the publish, so the next answer notices it.
func (f *Forwarder) noteDenied() {
	f.deniedMu.Lock()
	r, refused := f.seen.Advance()
	f.deniedMu.Unlock()
	if !refused || !f.repliesDenied(r) || !f.direct.CompareAndSwap(true, false) {
		return
	}
	f.probedAt.Store(f.cfg.Clock.Now().UnixNano())
	f.cfg.Logger.Warn("strict tags: NATS refused an answer to a handed-off request's client; the other vendors forward to this one again",
		"subject", r.Subject, "checks_again_every", f.cfg.Reprobe,
		"hint", "its permissions changed: grant the vendors' user publish on the reply prefixes (docs/security.md)")
}

// repliesDenied reports whether r refuses a publish under a reply prefix.
func (f *Forwarder) repliesDenied(r natsperm.Refusal) bool {
	for _, p := range f.cfg.ReplyPrefixes {
		if r.Op == natsperm.Publish && strings.HasPrefix(r.Subject, p) {
			return true
		}
	}
	return false
}

// HandoffProbe is the last token of the subjects a Forwarder publishes to,
// under each reply prefix, to learn whether its NATS user may answer
// clients directly: the connection's error handler may ignore its
// permission violations.
const HandoffProbe = "leaf-handoff-probe"

// mayAnswerClients reports whether NATS lets this connection publish under
// every reply prefix (a subject no one listens on): then, as a strict
// tag's leader, it can answer the clients of handed-off requests.
func (f *Forwarder) mayAnswerClients() bool {
	since := natsperm.Now(f.nc)
	for _, p := range f.cfg.ReplyPrefixes {
		if err := f.nc.Publish(p+HandoffProbe, nil); err != nil {
			return false
		}
	}
	if err := f.nc.Flush(); err != nil {
		return false
	}
	// Any refusal, not the probes' only: the connection keeps the last
	// error alone, so a refusal of another subject may hide theirs.
	_, refused := since.Refused()
	return !refused
}

// Close stops listening for every tag and waits for the forwarded requests
// being served (each bounded by the forward time-out).
func (f *Forwarder) Close(context.Context) error {
	f.serving.Stop()
	f.mu.Lock()
	subs := f.subs
	f.subs = nil
	f.mu.Unlock()
	var errs []error
	for sub := range subs {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
	}
	f.serving.Wait()
	f.cancel()
	return errors.Join(errs...)
}

var (
	forwardHeader       = nats.Header{vending.EncodingHeader: {vending.EncodingRanges}}
	forwardDirectHeader = nats.Header{vending.EncodingHeader: {vending.EncodingRanges}, directHeader: {"true"}}
)

// directHeader marks a leader's answer to a forward: it takes handed-off
// requests too, as its NATS user may answer clients directly.
const directHeader = "Leaf-Handoff-OK"

// notStrictHeader marks a leader's answer that the tag is normal again, so
// that the vendor that forwarded the request serves it the normal way.
const notStrictHeader = "Leaf-Not-Strict"

// Forward asks the leader of tag for n IDs. It fails with ErrNoLeader
// when no vendor listens as its leader, or the one that does is too slow to
// answer (frozen, or cut off): the caller then tries to take the lead,
// which the lease decides. handoff reports that the leader takes handed-off
// requests too (its NATS user may answer clients directly).
func (f *Forwarder) Forward(ctx context.Context, tag string, dst []ids.Range, n int64) (rs []ids.Range, handoff bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	msg := &nats.Msg{Subject: StrictSubject(f.cfg.Prefix, tag), Header: forwardHeader, Data: strconv.AppendInt(nil, n, 10)}
	reply, err := f.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return dst, false, fmt.Errorf("%w: %s: %w", ErrNoLeader, msg.Subject, err)
	case err != nil:
		return dst, false, fmt.Errorf("%w: forward to the leader of %q: %w", segment.ErrUnavailable, tag, err)
	}
	if reply.Header.Get(notStrictHeader) != "" {
		// Normal again: the caller takes the IDs the normal way.
		return dst, false, fmt.Errorf("%w: tag %q, as its leader found", segment.ErrNotStrict, tag)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		c, _ := strconv.Atoi(code)
		return dst, false, &vending.Error{Code: c, Message: "the leader of the strict tag: " + reply.Header.Get(micro.ErrorHeader)}
	}
	rs, err = vending.DecodeRanges(dst, reply.Data)
	if got := ids.Count(rs[len(dst):]); err != nil || got != n {
		return dst, false, fmt.Errorf("%w: the leader of %q answered %d IDs for %d: %v", segment.ErrUnavailable, tag, got, n, err)
	}
	return rs, reply.Header.Get(directHeader) != "", nil
}

// Listen answers the requests forwarded to this vendor as tag's leader,
// from ls, until stop is called or the Forwarder closes. Requests it can
// serve from memory are answered on the subscription's goroutine, in
// order; those that wait for the store in goroutines of their own.
func (f *Forwarder) Listen(tag string, ls *Leaders) (stop func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.serving.Stopped() {
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
		// Whether or not others hear it: they notice within
		// Config.HandoffFor.
		if err := f.nc.Publish(GoneSubject(f.cfg.Prefix), []byte(tag)); err != nil {
			f.cfg.Logger.Warn("telling the vendors that this one no longer leads a strict tag", "tag", tag, "err", err)
		}
	}, nil
}

// Follow makes ls forget a tag's leader as soon as it says it stepped down
// (Leaders.Forget), and every leader when a request handed to one found
// none listening (Leaders.ForgetAll), until the Forwarder closes.
func (f *Forwarder) Follow(ls *Leaders) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.serving.Stopped() {
		return fmt.Errorf("%w: closing", segment.ErrUnavailable)
	}
	gone, err := f.nc.Subscribe(GoneSubject(f.cfg.Prefix), func(m *nats.Msg) {
		if tag := string(m.Data); segment.ValidateTag(tag) == nil {
			ls.Forget(tag)
		}
	})
	if err != nil {
		return fmt.Errorf("listen on %s: %w", GoneSubject(f.cfg.Prefix), err)
	}
	lost, err := f.nc.Subscribe(f.lostPrefix+">", func(m *nats.Msg) { f.lostHandoff(ls, m) })
	if err != nil {
		gone.Unsubscribe()
		return fmt.Errorf("subscribe the lost handoffs' inbox: %w", err)
	}
	f.subs[gone], f.subs[lost] = struct{}{}, struct{}{}
	return nil
}

// HandOff hands a request of tag to its leader, which answers the client
// (and counts it, in its metrics). Its own reply subject is the lost
// handoffs' inbox followed by the client's: NATS answers "no responders"
// there when no leader listens, and lostHandoff answers the client. False
// when it could not be sent, or its reply subject would be longer than a
// leader answers: then it is served the slow way.
func (f *Forwarder) HandOff(tag string, r vending.Handing) bool {
	reply := f.lostPrefix + r.Reply
	if f.replies.Why(reply) != "" {
		return false
	}
	m := &nats.Msg{Subject: StrictSubject(f.cfg.Prefix, tag), Reply: reply, Header: nats.Header{HandoffHeader: {r.Reply}}, Data: r.Body}
	if r.Encoding != vending.EncodingText {
		m.Header[vending.EncodingHeader] = []string{r.Encoding}
	}
	return f.nc.PublishMsg(m) == nil
}

// lostHandoff answers the client of a handed-off request that found no
// leader with a 503 that says to ask again, and tells ls. Only the server's
// "no responders" counts, and only to a reply subject the service answers.
func (f *Forwarder) lostHandoff(ls *Leaders, m *nats.Msg) {
	reply := strings.TrimPrefix(m.Subject, f.lostPrefix)
	if m.Header.Get(statusHeader) != noRespondersStatus || f.replies.Why(reply) != "" {
		return
	}
	ls.ForgetAll()
	err := fmt.Errorf("%w: the leader of the strict tag is gone; ask again", segment.ErrUnavailable)
	if perr := f.nc.PublishMsg(vending.ErrorMsg(reply, err)); perr != nil {
		f.cfg.Logger.Warn("answering a strict request that found no leader", "reply", reply, "err", perr)
	}
	f.cfg.Observer.Observe(vending.ModeSegment, "", vending.CodeUnavailable, 0, 0)
}

// The header and value of NATS's "no responders" (nats.go keeps its own
// unexported).
const (
	statusHeader       = "Status"
	noRespondersStatus = "503"
)

// serve answers one request on the strict subject: forwarded (the
// forwarding vendor relays the answer) or handed off (answered to the
// client directly, as the service would), within the counts the service
// allows, past the gate, to an inbox only.
func (f *Forwarder) serve(tag string, ls *Leaders, m *nats.Msg) {
	if why := f.replies.Why(m.Reply); why != "" {
		f.cfg.Observer.Dropped(vending.ModeSegment, why)
		f.replies.Drop(f.cfg.Logger, m.Subject, m.Reply, why)
		return
	}
	client := m.Header.Get(HandoffHeader)
	if client == "" {
		f.take(tag, ls, m.Data, f.cfg.MaxCount, nil, func(rs []ids.Range, err error) { f.respond(m, rs, err) })
		return
	}
	if why := f.replies.Why(client); why != "" {
		f.cfg.Observer.Dropped(vending.ModeSegment, why)
		f.replies.Drop(f.cfg.Logger, m.Subject, client, why)
		return
	}
	start := f.cfg.Clock.Now()
	enc, err := vending.ParseEncoding(m.Header.Get(vending.EncodingHeader))
	limit := f.cfg.MaxBatch
	if enc == vending.EncodingRanges {
		limit = f.cfg.MaxCount
	}
	f.take(tag, ls, m.Data, limit, err, func(rs []ids.Range, err error) { f.answer(m.Subject, client, enc, tag, rs, err, start) })
}

// take serves a request of body's count (at most limit) as tag's leader
// and gives answer the IDs or why not; err is the request's fault found
// before. IDs in memory are answered on the subscription's goroutine, in
// order; those that wait for the store in goroutines of their own.
func (f *Forwarder) take(tag string, ls *Leaders, body []byte, limit int, err error, answer func([]ids.Range, error)) {
	if l := ls.leading(tag); l != nil && !l.passed.Load() {
		l.passed.Store(true) // another vendor passes this lead requests: the service leans
	}
	var c int
	if err == nil {
		c, err = vending.ParseCount(body, limit)
	}
	if err == nil {
		err = f.cfg.Gate.SegmentsErr()
	}
	if err != nil {
		answer(nil, err)
		return
	}
	n := int64(c)
	rs, ok, err := ls.TryTake(tag, nil, n)
	if ok || err != nil {
		answer(rs, err)
		return
	}
	if !f.serving.Go(func() {
		ctx, cancel := context.WithTimeout(f.ctx, f.cfg.Timeout)
		defer cancel()
		answer(ls.Serve(ctx, tag, nil, n))
	}) {
		answer(nil, fmt.Errorf("%w: this vendor is stopping", segment.ErrUnavailable))
	}
}

// respond answers a forwarded request with rs, or with err as the service
// would: its code and sentence.
func (f *Forwarder) respond(m *nats.Msg, rs []ids.Range, err error) {
	r := &nats.Msg{Subject: m.Reply, Header: forwardHeader}
	if f.direct.Load() {
		r.Header = forwardDirectHeader
	} else {
		f.reprobe()
	}
	if err != nil {
		r = errorMsg(m.Reply, err)
		if errors.Is(err, segment.ErrNotStrict) {
			r.Header.Set(notStrictHeader, "true")
		}
	} else {
		r.Data = vending.AppendRanges(nil, rs)
	}
	if err := f.nc.PublishMsg(r); err != nil {
		f.cfg.Logger.Warn("answering a forwarded strict request", "subject", m.Subject, "err", err)
	}
}

// answer answers a handed-off request to the client, as the service
// would: the IDs in the encoding it asked for, marked strict, or the
// error's code and sentence; and reports it.
func (f *Forwarder) answer(subject, client, enc, tag string, rs []ids.Range, err error, start time.Time) {
	if err == nil {
		r := vending.AnswerMsg(client, enc, true, rs)
		n := int(ids.Count(rs))
		if err = f.nc.PublishMsg(r); err == nil {
			f.noteDenied()
			f.cfg.Observer.Observe(vending.ModeSegment, tag, vending.CodeOK, n, f.cfg.Clock.Now().Sub(start))
			return
		}
		err = fmt.Errorf("the reply of %d IDs (%d bytes) could not be sent: %w", n, len(r.Data), err)
		f.cfg.Logger.Warn("answering a strict request handed to this leader", "subject", subject, "err", err)
	}
	code := vending.Code(err)
	if code == vending.CodeNotFound {
		tag = "" // unknown tags must not grow metric label sets
	}
	if perr := f.nc.PublishMsg(errorMsg(client, err)); perr != nil {
		f.cfg.Logger.Warn("answering a strict request handed to this leader", "subject", subject, "err", perr)
	}
	f.cfg.Observer.Observe(vending.ModeSegment, tag, code, 0, f.cfg.Clock.Now().Sub(start))
}

// errorMsg is the service's answer of err to subject. A lead lost
// meanwhile is a 503 that says to ask again.
func errorMsg(subject string, err error) *nats.Msg {
	if errors.Is(err, ErrNotLeader) {
		err = fmt.Errorf("%w: %w; ask again", segment.ErrUnavailable, err)
	}
	return vending.ErrorMsg(subject, err)
}

// HandoffHeader carries the client's reply subject on a request handed to
// a strict tag's leader on <prefix>.strict.<tag> (Segments.HandOff): the
// leader answers the client there as the service would, and never the
// request's own reply subject (the handing vendor's, for NATS's "no
// responders").
const HandoffHeader = "Leaf-Handoff"

// Gate says why this vendor may not serve segments now, nil when it may
// (cluster.Guard).
type Gate interface {
	SegmentsErr() error
}

// open is the Gate of a vendor with no other: it always may.
type open struct{}

func (open) SegmentsErr() error { return nil }

// discard is the Observer of a Forwarder configured with none.
type discard struct{}

func (discard) Observe(string, string, int, int, time.Duration) {}
func (discard) Dropped(string, string)                          {}
