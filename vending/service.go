package vending

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
)

// ServiceName is the micro service name all workers share.
const ServiceName = "leaf"

// Defaults of Config.
const (
	DefaultPrefix     = "leaf"
	DefaultQueueGroup = "leaf"
	DefaultMaxBatch   = 10000
	// DefaultMaxRangeBatch bounds a segment request in the ranges
	// encoding.
	DefaultMaxRangeBatch = 1_000_000_000
)

// ValidatePrefix checks a subject prefix: literal subject tokens (letters,
// digits, '_', '-', separated by single dots), as a tag is.
func ValidatePrefix(prefix string) error {
	if err := segment.ValidateTag(prefix); err != nil {
		return fmt.Errorf("subject prefix %q: use literal tokens of letters, digits, '_' and '-', separated by dots (such as leaf or ids.eu)", prefix)
	}
	return nil
}

// Snowflake is the source of snowflake IDs (workerid.Keeper, or a
// snowflake.Generator): n IDs as runs, one per millisecond.
type Snowflake interface {
	NextRanges(dst []ids.Range, n int) ([]ids.Range, error)
}

// Segments is the source of segment IDs (segment.Allocator): n IDs as at
// most a few runs.
type Segments interface {
	// TryTakeRanges serves from memory or reports (ok false) that it
	// would wait.
	TryTakeRanges(tag string, dst []ids.Range, n int64) (rs []ids.Range, ok bool, err error)
	TakeRanges(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error)
}

// StrictSegments is Segments that know which tags are strict: their
// replies carry StrictHeader, so that a client does not buffer their IDs.
type StrictSegments interface {
	Segments
	IsStrict(tag string) bool
}

// Handoffs is Segments that may hand a strict tag's request to its leader
// on another vendor (strict.Segments): the service then publishes the
// request on <prefix>.strict.<tag> with the client's reply subject in
// HandoffHeader, and the leader's Forwarder answers the client directly.
// That is one NATS message for a forward, its answer and the relayed reply.
type Handoffs interface {
	// Handoff reports whether a request of tag goes to its leader so.
	Handoff(tag string) bool
	// HandoffLost is told that a handed-off request found no leader
	// listening (NATS answered "no responders"): the next ones should find
	// out who leads.
	HandoffLost()
}

// Config configures a Service. The zero value of every field means its
// default (see ClientConfig for why configuration reads this way); Start
// checks the whole struct.
type Config struct {
	// Prefix of the subjects. Default "leaf".
	Prefix string
	// QueueGroup the workers share. Default "leaf".
	QueueGroup string
	// MaxBatch is the largest count one request may ask for, in the text
	// and binary encodings and for snowflake IDs in any. Default 10000.
	MaxBatch int
	// MaxRangeBatch is the largest count of segment IDs one request may ask
	// for in the ranges encoding, whose reply is a few bytes whatever the
	// count: a batch larger than a segment is allocated from the store
	// for itself. Default 1,000,000,000.
	MaxRangeBatch int
	// Version the service reports. Default "0.1.0".
	Version string
	// Snowflake serves <prefix>.snowflake when set.
	Snowflake Snowflake
	// Epoch of the snowflake IDs, for <prefix>.snowflake.decode. Default
	// snowflake.DefaultEpoch.
	Epoch int64
	// Layout of the snowflake IDs, for <prefix>.snowflake.decode and the
	// service metadata (MetaLayout). The zero value is the default layout.
	Layout snowflake.Layout
	// Segments serves <prefix>.segment.<tag> when set. It bounds how long a
	// request waits for its store itself (segment.Options.Wait).
	Segments Segments
	// Stats, when set, gives the data of each endpoint's stats in the
	// service's stats replies ($SRV.STATS.leaf), by endpoint name.
	Stats func(endpoint string) any
	// Metadata is added to the service's own (`nats micro info leaf`).
	Metadata map[string]string
	// Observer, when set, is told about every request.
	Observer Observer
	// ReplyPrefixes are the reply subjects the service answers: inboxes.
	// A request with any other reply subject is dropped unanswered, with
	// no ID taken (see replyGuard). Default DefaultReplyPrefixes.
	ReplyPrefixes []string
	// OwnInboxes are more prefixes never answered although they are under
	// a reply prefix: the inboxes on which the caller's JetStream requests
	// wait for their acks, which must not read a forged reply
	// (RequestInbox of that connection).
	OwnInboxes []string
	// RequesterRateLimit bounds the IDs a second one requester (Requester)
	// is handed by this vendor, in both modes, up to RequesterRateBurst at
	// once (default: a second of it): beyond them a request is answered
	// 429. 0: no bound.
	RequesterRateLimit float64
	RequesterRateBurst int
	// Logger receives subscription errors and internal errors. Default:
	// discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.QueueGroup == "" {
		c.QueueGroup = DefaultQueueGroup
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxRangeBatch == 0 {
		c.MaxRangeBatch = max(DefaultMaxRangeBatch, c.MaxBatch)
	}
	if c.Version == "" {
		c.Version = "0.1.0"
	}
	if c.Epoch == 0 {
		c.Epoch = snowflake.DefaultEpoch
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = noObserver{}
	}
	if len(c.ReplyPrefixes) == 0 {
		c.ReplyPrefixes = DefaultReplyPrefixes
	}
	var errs []error
	for _, p := range c.ReplyPrefixes {
		if err := CheckReplyPrefix(p, c.Prefix); err != nil {
			errs = append(errs, err)
		}
	}
	if c.RequesterRateLimit < 0 || c.RequesterRateBurst < 0 {
		errs = append(errs, fmt.Errorf("requester rate limit %g and burst %d: want 0 (none) or more", c.RequesterRateLimit, c.RequesterRateBurst))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("max batch %d must be at least 1", c.MaxBatch))
	}
	if c.MaxRangeBatch < c.MaxBatch {
		errs = append(errs, fmt.Errorf("max range batch %d must be at least the max batch %d", c.MaxRangeBatch, c.MaxBatch))
	}
	if err := ValidatePrefix(c.Prefix); err != nil {
		errs = append(errs, err)
	}
	if c.Snowflake == nil && c.Segments == nil {
		errs = append(errs, errors.New("nothing to serve: neither snowflake nor segments configured"))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("vending: %w", err)
	}
	return c, nil
}

// Request kinds, as Observer sees them.
const (
	ModeSnowflake = "snowflake"
	ModeSegment   = "segment"
	ModeDecode    = "decode"
)

// CodeOK is the code Observer sees for a request answered with IDs.
const CodeOK = 200

// Observer is told about every request, for metrics; it is called on the hot
// path, so it must be cheap. tag is empty except for valid segment tags.
type Observer interface {
	Observe(mode, tag string, code, ids int, took time.Duration)
	// Dropped is told of a request dropped unanswered, and why: its reply
	// subject is not one a vendor answers.
	Dropped(mode, why string)
}

type noObserver struct{}

func (noObserver) Observe(string, string, int, int, time.Duration) {}
func (noObserver) Dropped(string, string)                          {}

// Service answers ID requests as the micro service "leaf".
type Service struct {
	cfg Config
	nc  *nats.Conn
	svc micro.Service
	log *slog.Logger
	obs Observer
	wg  sync.WaitGroup // goroutines of slow segment requests
	// ctx bounds slow segment requests; Stop cancels it once they are done.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex // orders wg.Add against Stop
	stopping bool

	replies *Replies
	bulk    *bulkLane   // large snowflake batches
	reqs    *requesters // their budgets; nil without Config.RequesterRateLimit
	unknown *requesters // their budgets of tags the store does not have

	// lostPrefix is the inbox, with lostSub its subscription, on which
	// NATS says that a handed-off request found no leader (Handoffs).
	lostPrefix string
	lostSub    *nats.Subscription

	internal errorLog
}

// Open validates c and adds the service and its endpoints to nc. Close
// stops it.
func Open(nc *nats.Conn, c Config) (*Service, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: c, nc: nc, log: c.Logger, obs: c.Observer, replies: NewReplies(c.ReplyPrefixes, c.OwnInboxes),
		bulk: newBulkLane(c.Layout.MaxSequence() + 1), reqs: newRequesters(c.RequesterRateLimit, c.RequesterRateBurst),
		unknown: newRequesters(unknownTagRate, unknownTagBurst)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	meta := map[string]string{
		MetaMaxBatch:      strconv.Itoa(c.MaxBatch),
		MetaMaxRangeBatch: strconv.Itoa(c.MaxRangeBatch),
		"prefix":          c.Prefix,
		MetaLayout:        c.Layout.Name(),
		MetaLayoutBits:    c.Layout.String(),
		"encodings":       EncodingText + "," + EncodingBinary + "," + EncodingRanges,
		"encoding_header": EncodingHeader + ": " + EncodingText + " (default: ASCII decimals, one a line), " + EncodingBinary + " (8-byte big-endian IDs), " + EncodingRanges + " (runs of consecutive IDs as first,count pairs)",
		"errors":          "headers " + micro.ErrorCodeHeader + " (400 bad request, 404 unknown tag, 410 IDs used up, 429 a tag asked for faster than its rate limit, 503 cannot vend now, 500 a bug) and " + micro.ErrorHeader + " (what to do); the body is the same sentence",
	}
	for k, v := range c.Metadata {
		meta[k] = v
	}
	mc := micro.Config{
		Name:        ServiceName,
		Version:     c.Version,
		Description: "unique 64-bit IDs: snowflake and segment (Leaf)",
		QueueGroup:  c.QueueGroup,
		Metadata:    meta,
		ErrorHandler: func(_ micro.Service, err *micro.NATSError) {
			s.log.Error("service subscription error", "subject", err.Subject, "err", err.Description)
		},
	}
	if c.Stats != nil {
		mc.StatsHandler = func(e *micro.Endpoint) any { return c.Stats(e.Name) }
	}
	svc, err := micro.AddService(nc, mc)
	if err != nil {
		return nil, fmt.Errorf("vending: add micro service: %w", err)
	}
	s.svc = svc
	if err := s.addEndpoints(); err != nil {
		svc.Stop()
		return nil, err
	}
	// The subscriptions are live once the server has them: flush, so that
	// the caller's next request (on any connection) finds a responder.
	if err := nc.Flush(); err != nil {
		svc.Stop()
		s.unsubscribeLost()
		return nil, fmt.Errorf("vending: flush subscriptions: %w", err)
	}
	return s, nil
}

// Endpoint names, as micro stats and info show them.
const (
	EndpointSnowflake = "snowflake"
	EndpointDecode    = "decode"
	EndpointSegment   = "segment"
)

func (s *Service) addEndpoints() error {
	p, c := s.cfg.Prefix, s.cfg
	count := fmt.Sprintf("empty for one ID, or an ASCII decimal count from 1 to %d", c.MaxBatch)
	ids := "the IDs in ascending order, in the encoding the " + EncodingHeader + " header asks for"
	if c.Snowflake != nil {
		sf := &snowflakeHandler{s: s, src: c.Snowflake}
		if err := s.svc.AddEndpoint(EndpointSnowflake, s.guard(ModeSnowflake, sf), micro.WithEndpointSubject(p+".snowflake"), micro.WithEndpointMetadata(map[string]string{
			"request": count, "reply": ids, MetaMaxBatch: strconv.Itoa(c.MaxBatch),
			"errors": "503 while the worker-ID lease is not held or the clock is behind",
		})); err != nil {
			return fmt.Errorf("vending: add snowflake endpoint: %w", err)
		}
		if err := s.svc.AddEndpoint(EndpointDecode, s.guard(ModeDecode, micro.HandlerFunc(s.decode)), micro.WithEndpointSubject(p+".snowflake.decode"), micro.WithEndpointMetadata(map[string]string{
			"request":  "one snowflake ID as an ASCII decimal",
			"reply":    `JSON {"id","time","timestamp_ms","worker_id","sequence","layout"}; the id is a string`,
			"epoch":    strconv.FormatInt(c.Epoch, 10),
			MetaLayout: c.Layout.Name(),
		})); err != nil {
			return fmt.Errorf("vending: add decode endpoint: %w", err)
		}
	}
	if c.Segments != nil {
		sg := &segmentHandler{s: s, src: c.Segments, prefix: p + ".segment."}
		sg.ss, _ = c.Segments.(StrictSegments)
		sg.ho, _ = c.Segments.(Handoffs)
		if err := s.svc.AddEndpoint(EndpointSegment, s.guard(ModeSegment, sg), micro.WithEndpointSubject(p+".segment.>"), micro.WithEndpointMetadata(map[string]string{
			"subject":         p + ".segment.<tag>: a tag of " + segment.TagSyntax + " (vendor tags add <tag>)",
			"request":         count + fmt.Sprintf(" (to %d in the %s encoding)", c.MaxRangeBatch, EncodingRanges),
			"reply":           ids,
			MetaMaxBatch:      strconv.Itoa(c.MaxBatch),
			MetaMaxRangeBatch: strconv.Itoa(c.MaxRangeBatch),
			"errors":          "404 for a tag not in the store; 429 beyond the tag's rate limit (" + MetaRateLimit + "); 503 when the store is down and the tag's buffers are empty",
		})); err != nil {
			return fmt.Errorf("vending: add segment endpoint: %w", err)
		}
		if sg.ho != nil {
			return s.listenLost(sg.ho)
		}
	}
	return nil
}

// Close drains the endpoints (requests already received are answered) and
// waits for slow segment requests to finish (each bounded by the store's
// wait).
func (s *Service) Close(context.Context) error {
	defer s.cancel()
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	err := s.svc.Stop()
	s.wg.Wait()
	return errors.Join(err, s.unsubscribeLost())
}

// unsubscribeLost ends the lost handoffs' subscription, if any.
func (s *Service) unsubscribeLost() error {
	if s.lostSub == nil {
		return nil
	}
	if err := s.lostSub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return err
	}
	return nil
}

// scratch is a request's working memory, reused across requests handled
// one at a time on a subscription.
type scratch struct {
	sf  []ids.Range
	seg []ids.Range
	out []byte
}

// encoding returns the reply encoding req asks for.
func encoding(req micro.Request) (string, error) {
	return encodingOf(req.Headers().Get(EncodingHeader))
}

// encodingOf returns the reply encoding that header value e asks for.
func encodingOf(e string) (string, error) {
	switch e {
	case "", EncodingText:
		return EncodingText, nil
	case EncodingBinary, EncodingRanges:
		return e, nil
	default:
		return "", fmt.Errorf("%w: %s %q is not an encoding: use %s, %s or %s", ErrBadEncoding, EncodingHeader, quote([]byte(e)), EncodingText, EncodingBinary, EncodingRanges)
	}
}

// encode appends the IDs of rs to out in encoding enc.
func encode(out []byte, enc string, rs []ids.Range) []byte {
	switch enc {
	case EncodingRanges:
		return AppendRanges(out, rs)
	case EncodingBinary:
		return AppendBinaryRanges(out, rs)
	}
	return AppendTextRanges(out, rs)
}

// rangesReply marks a reply in the ranges encoding, so that a client can
// tell it from the text a vendor that predates ranges answers with. It is
// built once: the header costs no allocation per reply.
var (
	rangesReply       = micro.WithHeaders(micro.Headers{EncodingHeader: {EncodingRanges}})
	strictReply       = micro.WithHeaders(micro.Headers{StrictHeader: {"true"}})
	rangesStrictReply = micro.WithHeaders(micro.Headers{EncodingHeader: {EncodingRanges}, StrictHeader: {"true"}})
)

// reply answers req with rs in encoding enc, and reports it.
// A strict tag's reply says so.
func reply(s *Service, req micro.Request, out *[]byte, enc, mode, tag string, strict bool, rs []ids.Range, start time.Time) {
	*out = encode((*out)[:0], enc, rs)
	n := int(ids.Count(rs))
	var err error
	switch {
	case enc == EncodingRanges && strict:
		err = req.Respond(*out, rangesStrictReply)
	case enc == EncodingRanges:
		err = req.Respond(*out, rangesReply)
	case strict:
		err = req.Respond(*out, strictReply)
	default:
		err = req.Respond(*out)
	}
	if err != nil {
		s.failSend(req, mode, tag, n, len(*out), err, start)
		return
	}
	s.obs.Observe(mode, tag, CodeOK, n, time.Since(start))
}

// failSend answers a request whose reply could not be sent (larger than the
// server's max_payload, or the connection closing) with a 500 that says so:
// its IDs are used up and never handed out, and it counts as an error in
// the metrics and micro stats, not as IDs.
func (s *Service) failSend(req micro.Request, mode, tag string, n, size int, err error, start time.Time) {
	if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, micro.ErrRespond) && s.nc.MaxPayload() < int64(size) {
		err = fmt.Errorf("the reply of %d IDs takes %d bytes, more than the NATS server's max_payload of %d: ask for fewer IDs, or use the binary or ranges encoding (%w)",
			n, size, s.nc.MaxPayload(), err)
	} else {
		err = fmt.Errorf("the reply of %d IDs could not be sent: %w", n, err)
	}
	s.internal.note(s, err)
	msg := err.Error()
	req.Error(strconv.Itoa(CodeInternal), msg, []byte(msg))
	s.obs.Observe(mode, tag, CodeInternal, 0, time.Since(start))
}

// snowflakeHandler serves <prefix>.snowflake. micro calls it from the
// subscription's one goroutine, so its scratch needs no lock.
type snowflakeHandler struct {
	s   *Service
	src Snowflake
	scratch
}

func (h *snowflakeHandler) Handle(req micro.Request) {
	start := time.Now()
	enc, err := encoding(req)
	var n int
	if err == nil {
		n, err = ParseCount(req.Data(), h.s.cfg.MaxBatch)
	}
	var c charge
	if err == nil {
		c, err = h.s.charge(req, n)
	}
	if err == nil && h.s.bulk.large(n) {
		h.bulk(req, enc, n, c, start)
		return
	}
	if err == nil {
		if h.sf, err = h.src.NextRanges(h.sf[:0], n); err != nil {
			c.refund()
		}
	}
	if err != nil {
		h.s.fail(req, ModeSnowflake, "", err, start)
		return
	}
	reply(h.s, req, &h.out, enc, ModeSnowflake, "", false, h.sf, start)
}

// segmentHandler serves <prefix>.segment.<tag>. A request that can be served
// from memory is answered inline; one that must wait for the store moves to
// a goroutine, so a slow tag does not hold up the others.
type segmentHandler struct {
	s      *Service
	src    Segments
	ss     StrictSegments // src, when it can tell strict tags
	ho     Handoffs       // src, when it hands requests to leaders
	prefix string
	scratch
}

// strict reports whether tag is strict, when the source can tell.
func (h *segmentHandler) strict(tag string) bool {
	return h.ss != nil && h.ss.IsStrict(tag)
}

func (h *segmentHandler) Handle(req micro.Request) {
	start := time.Now()
	tag := strings.TrimPrefix(req.Subject(), h.prefix)
	if err := segment.ValidateTag(tag); err != nil {
		h.s.fail(req, ModeSegment, "", err, start)
		return
	}
	enc, err := encoding(req)
	var n int
	if err == nil {
		limit := h.s.cfg.MaxBatch
		if enc == EncodingRanges {
			limit = h.s.cfg.MaxRangeBatch
		}
		n, err = ParseCount(req.Data(), limit)
	}
	var c charge
	if err == nil {
		c, err = h.s.charge(req, n)
	}
	if err != nil {
		h.s.fail(req, ModeSegment, tag, err, start)
		return
	}
	rs, ok, err := h.src.TryTakeRanges(tag, h.seg[:0], int64(n))
	h.seg = rs
	switch {
	case err != nil:
		c.refund()
		h.s.fail(req, ModeSegment, tag, err, start)
	case ok:
		reply(h.s, req, &h.out, enc, ModeSegment, tag, h.strict(tag), rs, start)
	case h.ho != nil && h.ho.Handoff(tag) && h.s.handoff(req, tag, enc):
	default:
		if err := h.s.mayAskStore(req); err != nil {
			c.refund()
			h.s.fail(req, ModeSegment, tag, err, start)
			return
		}
		h.s.later(req, func(req micro.Request) { h.s.takeSlow(req, h.src, tag, enc, n, c, start) })
	}
}

// handoff hands req to the leader of its strict tag, which answers the
// client (and counts it, in its metrics). Its own reply subject is this
// service's lost-handoff inbox followed by the client's: NATS answers
// "no responders" there when no leader listens, and lostHandoff answers
// the client. False when it could not be sent, or its reply subject would
// be longer than a leader answers: then it is served the slow way.
func (s *Service) handoff(req micro.Request, tag, enc string) bool {
	if len(s.lostPrefix)+len(req.Reply()) > maxReplyLen {
		return false
	}
	m := &nats.Msg{Subject: StrictSubject(s.cfg.Prefix, tag), Reply: s.lostPrefix + req.Reply(), Header: nats.Header{HandoffHeader: {req.Reply()}}, Data: req.Data()}
	if enc != EncodingText {
		m.Header[EncodingHeader] = []string{enc}
	}
	return s.nc.PublishMsg(m) == nil
}

// listenLost subscribes the inbox on which NATS says that a handed-off
// request found no leader listening.
func (s *Service) listenLost(ho Handoffs) error {
	s.lostPrefix = s.nc.NewInbox() + "."
	sub, err := s.nc.Subscribe(s.lostPrefix+">", func(m *nats.Msg) { s.lostHandoff(ho, m) })
	if err != nil {
		return fmt.Errorf("vending: subscribe the lost handoffs' inbox: %w", err)
	}
	s.lostSub = sub
	return nil
}

// lostHandoff answers the client of a handed-off request that found no
// leader with a 503 that says to ask again, and tells ho. Only the server's
// "no responders" counts, and only to a reply subject the service answers.
func (s *Service) lostHandoff(ho Handoffs, m *nats.Msg) {
	reply := strings.TrimPrefix(m.Subject, s.lostPrefix)
	if m.Header.Get(statusHeader) != noRespondersStatus || s.replies.Why(reply) != "" {
		return
	}
	ho.HandoffLost()
	err := fmt.Errorf("%w: the leader of the strict tag is gone; ask again", segment.ErrUnavailable)
	if perr := s.nc.PublishMsg(errorReply(reply, err)); perr != nil {
		s.log.Warn("answering a strict request that found no leader", "reply", reply, "err", perr)
	}
	s.obs.Observe(ModeSegment, "", CodeUnavailable, 0, 0)
}

// The header and value of NATS's "no responders" (nats.go keeps its own
// unexported).
const (
	statusHeader       = "Status"
	noRespondersStatus = "503"
)

func (s *Service) takeSlow(req micro.Request, src Segments, tag, enc string, n int, c charge, start time.Time) {
	rs, err := src.TakeRanges(s.ctx, tag, nil, int64(n))
	if err != nil {
		c.refund()
		s.askedUnknown(req, err)
		s.fail(req, ModeSegment, tag, err, start)
		return
	}
	var out []byte
	strict := false
	if ss, ok := src.(StrictSegments); ok {
		strict = ss.IsStrict(tag)
	}
	reply(s, req, &out, enc, ModeSegment, tag, strict, rs, start)
}

// decode serves <prefix>.snowflake.decode.
func (s *Service) decode(req micro.Request) {
	start := time.Now()
	body := strings.TrimSpace(string(req.Data()))
	id, err := strconv.ParseInt(body, 10, 64)
	if err != nil {
		s.fail(req, ModeDecode, "", fmt.Errorf("%w: the request body must be one snowflake ID as a decimal, not %s", ErrBadID, quote(req.Data())), start)
		return
	}
	l := s.cfg.Layout
	p, err := l.Decode(id, s.cfg.Epoch)
	if err != nil {
		s.fail(req, ModeDecode, "", fmt.Errorf("%w: %d is not a snowflake ID of layout %s (%s): IDs are positive decimals such as %d", ErrBadID, id, l.Name(), l, exampleID(l)), start)
		return
	}
	req.RespondJSON(Decoded{
		ID:          strconv.FormatInt(id, 10),
		Time:        p.Time().Format(time.RFC3339Nano),
		TimestampMs: p.UnixMilli,
		WorkerID:    p.WorkerID,
		Sequence:    p.Sequence,
		Layout:      l.Name(),
	})
	s.obs.Observe(ModeDecode, "", CodeOK, 0, time.Since(start))
}

// Decoded is the reply of <prefix>.snowflake.decode. The ID is a string so
// that JSON readers with float64 numbers (JavaScript, jq) keep every digit.
type Decoded struct {
	ID          string `json:"id"`
	Time        string `json:"time"`
	TimestampMs int64  `json:"timestamp_ms"`
	WorkerID    int    `json:"worker_id"`
	Sequence    int    `json:"sequence"`
	// Layout is the layout the ID was read in (LEAF_SNOWFLAKE_LAYOUT):
	// "default" or "js53".
	Layout string `json:"layout"`
}

// exampleID is an ID of layout l, for error messages.
func exampleID(l snowflake.Layout) int64 {
	if l == snowflake.LayoutJS53 {
		return 1946275943805701
	}
	return 1862213154793730049
}

// MetaLayout is the service metadata key of the snowflake layout's name
// (LEAF_SNOWFLAKE_LAYOUT: default or js53), so that a client can tell
// whether IDs fit a JavaScript number (js53: below 2^53). MetaLayoutBits
// is its bit split, "1+41+10+12" or "11+41+4+8".
const (
	MetaLayout     = "snowflake_layout"
	MetaLayoutBits = "snowflake_layout_bits"
)

// MetaMaxBatch is the service metadata key of the largest count one
// request may ask for (LEAF_MAX_BATCH), so that clients can find it with
// `nats micro info leaf` or ServiceMaxBatch.
const MetaMaxBatch = "max_batch"

// MetaMaxRangeBatch is the service metadata key of the largest count of
// segment IDs one request may ask for in the ranges encoding.
const MetaMaxRangeBatch = "max_range_batch"

// MetaRateLimit is the service metadata key of the most IDs a second one
// vendor hands out of one segment tag (LEAF_SEGMENT_RATE_LIMIT; 0: no
// limit).
const MetaRateLimit = "segment_rate_limit"

// MetaRateBurst is the service metadata key of the most IDs of one segment
// tag one vendor hands out at once (LEAF_SEGMENT_RATE_BURST; 0: no limit):
// a request for more is refused, so a client's prefetch asks for no more.
const MetaRateBurst = "segment_rate_burst"

// ServiceMaxBatch asks a running vendor ($SRV.INFO.leaf) for the largest
// count one request may ask for.
func ServiceMaxBatch(nc *nats.Conn, timeout time.Duration) (int, error) {
	subject, err := micro.ControlSubject(micro.InfoVerb, ServiceName, "")
	if err != nil {
		return 0, err
	}
	msg, err := nc.Request(subject, nil, timeout)
	if err != nil {
		return 0, fmt.Errorf("vending: ask a vendor for its max batch: %w", err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return 0, fmt.Errorf("vending: service info: %w", err)
	}
	n, err := strconv.Atoi(info.Metadata[MetaMaxBatch])
	if err != nil {
		return 0, fmt.Errorf("vending: service info has no %s: %q", MetaMaxBatch, info.Metadata[MetaMaxBatch])
	}
	return n, nil
}

// ClusterStats asks every running instance of the service for its stats
// ($SRV.STATS.leaf) and returns the replies that arrive within wait.
func ClusterStats(nc *nats.Conn, wait time.Duration) ([]micro.Stats, error) {
	subject, err := micro.ControlSubject(micro.StatsVerb, ServiceName, "")
	if err != nil {
		return nil, err
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("vending: cluster stats: %w", err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("vending: cluster stats: %w", err)
	}
	var out []micro.Stats
	deadline := time.Now().Add(wait)
	for {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break // the deadline: everyone who answers in time has
		}
		var st micro.Stats
		if json.Unmarshal(msg.Data, &st) == nil {
			out = append(out, st)
		}
	}
	return out, nil
}
