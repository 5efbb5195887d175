package vending

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
)

// scratch is a request's working memory, reused across requests handled
// one at a time on a subscription.
type scratch struct {
	sf  []ids.Range
	seg []ids.Range
	out []byte
}

// reply answers req with rs in encoding enc, and reports it.
func reply(s *Service, req micro.Request, out *[]byte, enc, mode, tag string, strict bool, rs []ids.Range, start time.Time) {
	var kind answerKind
	*out, kind = AppendAnswer((*out)[:0], enc, strict, rs)
	n := int(ids.Count(rs))
	if err := req.Respond(*out, kind.opts...); err != nil {
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
	prefix string
	// leaning: the handler of one of a lean's subscriptions (lean), not
	// micro's endpoint.
	leaning bool
	scratch
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
	if h.leaning && !ok && err == nil && !h.src.Leans(tag) {
		h.s.unlean(tag) // no longer its leader: served as any vendor serves it
	}
	switch {
	case err != nil:
		c.refund()
		h.s.fail(req, ModeSegment, tag, err, start)
	case ok:
		strict := h.src.IsStrict(tag)
		reply(h.s, req, &h.out, enc, ModeSegment, tag, strict, rs, start)
		if strict && !h.leaning && h.src.Leans(tag) {
			h.s.lean(tag)
		}
	case h.src.HandOff(tag, Handing{Reply: req.Reply(), Encoding: enc, Body: req.Data()}):
	default:
		if err := h.s.mayAskStore(req); err != nil {
			c.refund()
			h.s.fail(req, ModeSegment, tag, err, start)
			return
		}
		h.s.later(req, func(req micro.Request) { h.s.takeSlow(req, h.src, tag, enc, n, c, start) })
	}
}

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
	reply(s, req, &out, enc, ModeSegment, tag, src.IsStrict(tag), rs, start)
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
	d := Decoded{
		ID:          strconv.FormatInt(id, 10),
		Time:        p.Time().Format(time.RFC3339Nano),
		TimestampMs: p.UnixMilli,
		WorkerID:    p.WorkerID,
		Sequence:    p.Sequence,
		Layout:      l.Name(),
	}
	if r := s.cfg.Region; r.Name != "" {
		// The worker ID's block names the region, whichever made it.
		id := l.RegionOf(p.WorkerID)
		d.RegionID = &id
		if id == r.ID {
			d.Region = r.Name
		}
	}
	req.RespondJSON(d)
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
	// RegionID is the region that made the ID, from its worker ID's block,
	// when the vendor that decodes it has a region (LEAF_REGION_ID); Region
	// its name when it is the decoding vendor's own.
	RegionID *int   `json:"region_id,omitempty"`
	Region   string `json:"region,omitempty"`
}

// exampleID is an ID of layout l, for error messages.
func exampleID(l snowflake.Layout) int64 {
	if l == snowflake.LayoutJS53 {
		return 1946275943805701
	}
	return 1862213154793730049
}
