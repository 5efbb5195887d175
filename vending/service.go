package vending

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

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
)

// Snowflake is the source of snowflake IDs (snowflake.Slot).
type Snowflake interface {
	NextN(dst []int64, n int) ([]int64, error)
}

// Segments is the source of segment IDs (segment.Allocator).
type Segments interface {
	// TryTake serves from memory or reports (ok false) that it would wait.
	TryTake(tag string, dst []int64, n int) (ids []int64, ok bool, err error)
	Take(ctx context.Context, tag string, dst []int64, n int) ([]int64, error)
}

// Config configures a Service. Zero values mean defaults.
type Config struct {
	Prefix     string
	QueueGroup string
	MaxBatch   int
	Version    string
	// Snowflake serves <prefix>.snowflake when set.
	Snowflake Snowflake
	// Epoch of the snowflake IDs, for <prefix>.snowflake.decode.
	Epoch int64
	// Segments serves <prefix>.segment.<tag> when set.
	Segments Segments
	// SegmentWait bounds a segment request that has to wait for a load.
	SegmentWait time.Duration
	// Stats, when set, adds its value to the service's stats replies
	// ($SRV.STATS.leaf).
	Stats  func() any
	Logger *slog.Logger
}

// Service answers ID requests as the micro service "leaf".
type Service struct {
	cfg  Config
	svc  micro.Service
	log  *slog.Logger
	wg   sync.WaitGroup // slow segment requests
	stop chan struct{}

	internal errorLog
}

// Start validates c and adds the service and its endpoints to nc.
func Start(nc *nats.Conn, c Config) (*Service, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.QueueGroup == "" {
		c.QueueGroup = DefaultQueueGroup
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.Version == "" {
		c.Version = "0.1.0"
	}
	if c.Epoch == 0 {
		c.Epoch = snowflake.DefaultEpoch
	}
	if c.SegmentWait == 0 {
		c.SegmentWait = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.MaxBatch < 1:
		return nil, fmt.Errorf("vending: max batch %d must be at least 1", c.MaxBatch)
	case strings.ContainsAny(c.Prefix, "*> \t") || strings.HasPrefix(c.Prefix, ".") || strings.HasSuffix(c.Prefix, "."):
		return nil, fmt.Errorf("vending: subject prefix %q must be literal subject tokens (no wildcards, spaces or edge dots)", c.Prefix)
	case c.Snowflake == nil && c.Segments == nil:
		return nil, errors.New("vending: nothing to serve: neither snowflake nor segments configured")
	}
	s := &Service{cfg: c, log: c.Logger, stop: make(chan struct{})}
	mc := micro.Config{
		Name:        ServiceName,
		Version:     c.Version,
		Description: "unique 64-bit IDs: snowflake and segment (Leaf)",
		QueueGroup:  c.QueueGroup,
		ErrorHandler: func(_ micro.Service, err *micro.NATSError) {
			s.log.Error("service subscription error", "subject", err.Subject, "err", err.Description)
		},
	}
	if c.Stats != nil {
		mc.StatsHandler = func(*micro.Endpoint) any { return c.Stats() }
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
	return s, nil
}

func (s *Service) addEndpoints() error {
	p := s.cfg.Prefix
	if s.cfg.Snowflake != nil {
		sf := &snowflakeHandler{s: s, src: s.cfg.Snowflake}
		if err := s.svc.AddEndpoint("snowflake", sf, micro.WithEndpointSubject(p+".snowflake")); err != nil {
			return fmt.Errorf("vending: add snowflake endpoint: %w", err)
		}
		if err := s.svc.AddEndpoint("decode", micro.HandlerFunc(s.decode), micro.WithEndpointSubject(p+".snowflake.decode")); err != nil {
			return fmt.Errorf("vending: add decode endpoint: %w", err)
		}
	}
	if s.cfg.Segments != nil {
		sg := &segmentHandler{s: s, src: s.cfg.Segments, prefix: p + ".segment."}
		if err := s.svc.AddEndpoint("segment", sg, micro.WithEndpointSubject(p+".segment.>")); err != nil {
			return fmt.Errorf("vending: add segment endpoint: %w", err)
		}
	}
	return nil
}

// Stop drains the endpoints (requests already received are answered) and
// waits for slow segment requests to finish.
func (s *Service) Stop() error {
	close(s.stop)
	err := s.svc.Stop()
	s.wg.Wait()
	return err
}

// scratch is a request's working memory, reused across requests handled
// one at a time on a subscription.
type scratch struct {
	ids []int64
	out []byte
}

func (b *scratch) reply(req micro.Request, ids []int64) {
	if req.Headers().Get(EncodingHeader) == EncodingBinary {
		b.out = AppendBinary(b.out[:0], ids)
	} else {
		b.out = AppendText(b.out[:0], ids)
	}
	req.Respond(b.out)
}

// snowflakeHandler serves <prefix>.snowflake. micro calls it from the
// subscription's one goroutine, so its scratch needs no lock.
type snowflakeHandler struct {
	s   *Service
	src Snowflake
	scratch
}

func (h *snowflakeHandler) Handle(req micro.Request) {
	n, err := ParseCount(req.Data(), h.s.cfg.MaxBatch)
	if err != nil {
		h.s.fail(req, err)
		return
	}
	h.ids, err = h.src.NextN(h.ids[:0], n)
	if err != nil {
		h.s.fail(req, err)
		return
	}
	h.reply(req, h.ids)
}

// segmentHandler serves <prefix>.segment.<tag>. A request that can be served
// from memory is answered inline; one that must wait for the store moves to
// a goroutine, so a slow tag does not hold up the others.
type segmentHandler struct {
	s      *Service
	src    Segments
	prefix string
	scratch
}

func (h *segmentHandler) Handle(req micro.Request) {
	tag := strings.TrimPrefix(req.Subject(), h.prefix)
	if err := segment.ValidateTag(tag); err != nil {
		h.s.fail(req, err)
		return
	}
	n, err := ParseCount(req.Data(), h.s.cfg.MaxBatch)
	if err != nil {
		h.s.fail(req, err)
		return
	}
	ids, ok, err := h.src.TryTake(tag, h.ids[:0], n)
	h.ids = ids
	switch {
	case err != nil:
		h.s.fail(req, err)
	case ok:
		h.reply(req, ids)
	default:
		h.s.wg.Add(1)
		go h.s.slowSegment(req, h.src, tag, n)
	}
}

func (s *Service) slowSegment(req micro.Request, src Segments, tag string, n int) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.SegmentWait)
	defer cancel()
	go func() { // tie ctx to shutdown; ends with cancel
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var b scratch
	ids, err := src.Take(ctx, tag, nil, n)
	if err != nil {
		s.fail(req, err)
		return
	}
	b.reply(req, ids)
}

// decode serves <prefix>.snowflake.decode.
func (s *Service) decode(req micro.Request) {
	body := strings.TrimSpace(string(req.Data()))
	id, err := strconv.ParseInt(body, 10, 64)
	if err != nil {
		s.fail(req, fmt.Errorf("%w: the request body must be one snowflake ID as a decimal, not %s", ErrBadID, quote(req.Data())))
		return
	}
	p, err := snowflake.Decode(id, s.cfg.Epoch)
	if err != nil {
		s.fail(req, fmt.Errorf("%w: %v", ErrBadID, err))
		return
	}
	req.RespondJSON(Decoded{
		ID:          strconv.FormatInt(id, 10),
		Time:        p.Time().Format(time.RFC3339Nano),
		TimestampMs: p.UnixMilli,
		WorkerID:    p.WorkerID,
		Sequence:    p.Sequence,
	})
}

// Decoded is the reply of <prefix>.snowflake.decode. The ID is a string so
// that JSON readers with float64 numbers (JavaScript, jq) keep every digit.
type Decoded struct {
	ID          string `json:"id"`
	Time        string `json:"time"`
	TimestampMs int64  `json:"timestamp_ms"`
	WorkerID    int    `json:"worker_id"`
	Sequence    int    `json:"sequence"`
}
