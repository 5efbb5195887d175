package vending

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/internal/inflight"
	"github.com/leaf-nats/leaf/internal/scatter"
	"github.com/leaf-nats/leaf/segment"
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

// Service answers ID requests as the micro service "leaf".
type Service struct {
	cfg Config
	nc  *nats.Conn
	mc  micro.Config // of every micro service it adds
	log *slog.Logger
	obs Observer
	// slow are the goroutines of requests served later (later); ctx
	// bounds them, and Close cancels it once they are done.
	slow   inflight.Group
	ctx    context.Context
	cancel context.CancelFunc
	loop   sync.WaitGroup // the readiness loop
	stop   chan struct{}  // closed by Close: ends the readiness loop

	mu       sync.Mutex // guards the fields below
	stopping bool
	svc      micro.Service // nil while it serves no mode
	serving  Modes

	followMu sync.Mutex   // one readiness check at a time
	since    [2]time.Time // when snowflake and segments were last servable

	replies *Replies
	leans   leans       // the strict tags it leads, whose requests it takes directly
	bulk    *bulkLane   // large snowflake batches
	reqs    *requesters // their budgets; nil without Config.RequesterRateLimit
	unknown *requesters // their budgets of tags the store does not have

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
		unknown: newRequesters(unknownTagRate, unknownTagBurst), stop: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mc = s.microConfig()
	m := Modes{Snowflake: c.Snowflake != nil, Segments: c.Segments != nil}
	if c.Readiness != nil {
		s.followMu.Lock()
		m = s.wanted(time.Now()) // what the vendor can serve now; the loop follows
		s.followMu.Unlock()
	}
	if err := s.serve(m); err != nil {
		return nil, err
	}
	if c.Readiness != nil {
		s.loop.Go(s.followReadiness)
	}
	return s, nil
}

// microConfig is the micro service's configuration.
func (s *Service) microConfig() micro.Config {
	c := s.cfg
	meta := map[string]string{
		MetaMaxBatch:      strconv.Itoa(c.MaxBatch),
		MetaMaxRangeBatch: strconv.Itoa(c.MaxRangeBatch),
		"prefix":          c.Prefix,
		MetaLayout:        c.Layout.Name(),
		MetaLayoutBits:    c.Layout.String(),
		"encodings":       EncodingText + "," + EncodingBinary + "," + EncodingRanges,
		"encoding_header": EncodingHeader + ": " + EncodingText + " (default: ASCII decimals, one a line), " + EncodingBinary + " (8-byte big-endian IDs), " + EncodingRanges + " (runs of " +
			"consecutive IDs as first,count pairs)",
		"errors": "headers " + micro.ErrorCodeHeader + " (400 bad request, 404 unknown tag, 410 IDs used up, 429 a tag asked for faster than its rate limit, 503 cannot " +
			"vend now, 500 a bug) and " + micro.ErrorHeader + " (what to do); the body is the same sentence",
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
	return mc
}

// serve answers the modes m asks for, from now on: a new micro service
// with their endpoints replaces the one before (micro cannot remove an
// endpoint), which drains after the new one is up, so that every request
// it received is answered and none finds no responder meanwhile. Open and
// the readiness loop call it, one at a time.
func (s *Service) serve(m Modes) error {
	var svc micro.Service
	if m.Snowflake || m.Segments || s.cfg.Snowflake != nil {
		var err error
		if svc, err = s.addService(m); err != nil {
			return err
		}
	}
	s.mu.Lock()
	old := s.svc
	if s.stopping {
		old = svc // Close stopped the one before
	} else {
		s.svc, s.serving = svc, m
	}
	s.mu.Unlock()
	if old != nil {
		if err := old.Stop(); err != nil {
			s.log.Warn("stopping the micro service before", "err", err)
		}
	}
	return nil
}

// addService adds a micro service with the endpoints of modes m.
func (s *Service) addService(m Modes) (micro.Service, error) {
	svc, err := micro.AddService(s.nc, s.mc)
	if err != nil {
		return nil, fmt.Errorf("vending: add micro service: %w", err)
	}
	if err := s.addEndpoints(svc, m); err != nil {
		svc.Stop()
		return nil, err
	}
	// The subscriptions are live once the server has them: flush, so that
	// the caller's next request (on any connection) finds a responder.
	if err := s.nc.Flush(); err != nil {
		svc.Stop()
		return nil, fmt.Errorf("vending: flush subscriptions: %w", err)
	}
	return svc, nil
}

// Endpoint names, as micro stats and info show them.
const (
	EndpointSnowflake = "snowflake"
	EndpointDecode    = "decode"
	EndpointSegment   = "segment"
)

func (s *Service) addEndpoints(svc micro.Service, m Modes) error {
	p, c := s.cfg.Prefix, s.cfg
	count := fmt.Sprintf("empty for one ID, or an ASCII decimal count from 1 to %d", c.MaxBatch)
	ids := "the IDs in ascending order, in the encoding the " + EncodingHeader + " header asks for"
	if c.Snowflake != nil && m.Snowflake {
		sf := &snowflakeHandler{s: s, src: c.Snowflake}
		if err := svc.AddEndpoint(EndpointSnowflake, s.guard(ModeSnowflake, sf), micro.WithEndpointSubject(p+".snowflake"), micro.WithEndpointMetadata(map[string]string{
			"request": count, "reply": ids, MetaMaxBatch: strconv.Itoa(c.MaxBatch),
			"errors": "503 while the worker-ID lease is not held or the clock is behind",
		})); err != nil {
			return fmt.Errorf("vending: add snowflake endpoint: %w", err)
		}
	}
	if c.Snowflake != nil { // decoding needs no state: always served
		if err := svc.AddEndpoint(EndpointDecode, s.guard(ModeDecode, micro.HandlerFunc(s.decode)), micro.WithEndpointSubject(p+".snowflake.decode"), micro.WithEndpointMetadata(map[string]string{
			"request":  "one snowflake ID as an ASCII decimal",
			"reply":    `JSON {"id","time","timestamp_ms","worker_id","sequence","layout"}; the id is a string`,
			"epoch":    strconv.FormatInt(c.Epoch, 10),
			MetaLayout: c.Layout.Name(),
		})); err != nil {
			return fmt.Errorf("vending: add decode endpoint: %w", err)
		}
	}
	if c.Segments != nil && m.Segments {
		sg := &segmentHandler{s: s, src: c.Segments, prefix: p + ".segment."}
		if err := svc.AddEndpoint(EndpointSegment, s.guard(ModeSegment, sg), micro.WithEndpointSubject(p+".segment.>"), micro.WithEndpointMetadata(map[string]string{
			"subject":         p + ".segment.<tag>: a tag of " + segment.TagSyntax + " (vendor tags add <tag>)",
			"request":         count + fmt.Sprintf(" (to %d in the %s encoding)", c.MaxRangeBatch, EncodingRanges),
			"reply":           ids,
			MetaMaxBatch:      strconv.Itoa(c.MaxBatch),
			MetaMaxRangeBatch: strconv.Itoa(c.MaxRangeBatch),
			"errors":          "404 for a tag not in the store; 429 beyond the tag's rate limit (" + MetaRateLimit + "); 503 when the store is down and the tag's buffers are empty",
		})); err != nil {
			return fmt.Errorf("vending: add segment endpoint: %w", err)
		}
	}
	return nil
}

// Close drains the endpoints (requests already received are answered) and
// waits for slow segment requests to finish (each bounded by the store's
// wait).
func (s *Service) Close(context.Context) error {
	defer s.cancel()
	close(s.stop)
	s.loop.Wait()
	s.stopLeaning()
	s.slow.Stop()
	s.mu.Lock()
	s.stopping = true
	svc := s.svc
	s.mu.Unlock()
	var err error
	if svc != nil {
		err = svc.Stop()
	}
	s.slow.Wait()
	return err
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
// ($SRV.STATS.leaf) and returns the replies that arrive within wait. It
// fails when NATS refuses nc's user the request, rather than answering a
// cluster of none.
func ClusterStats(nc *nats.Conn, wait time.Duration) ([]micro.Stats, error) {
	subject, err := micro.ControlSubject(micro.StatsVerb, ServiceName, "")
	if err != nil {
		return nil, err
	}
	var out []micro.Stats
	err = scatter.Ask(context.Background(), nc, subject, scatter.Question{Wait: wait}, func(a scatter.Answer) {
		var st micro.Stats
		if json.Unmarshal(a.Data, &st) == nil {
			out = append(out, st)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("vending: cluster stats: %w", err)
	}
	return out, nil
}
