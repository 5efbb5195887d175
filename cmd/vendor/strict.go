package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/strict"
	"github.com/leaf-nats/leaf/vending"
)

// forwardTimeout bounds a strict tag's request forwarded to its leader: the
// segment wait, so that the client's 503 arrives within its own time-out.
const forwardTimeout = 500 * time.Millisecond

// strictSubject is the subject on which a strict tag's leader takes the
// requests other vendors forward: <prefix>.strict.<tag>.
func strictSubject(prefix, tag string) string { return prefix + ".strict." + tag }

// strictTags is the strict side of a vendor's segments.
type strictTags struct {
	*strict.Leaders
	fwd *forwarder
}

// Close steps down from every lead (releasing the leases, so that another
// vendor leads at once) and waits for the forwarded requests in flight.
func (st *strictTags) Close() {
	st.Leaders.Close()
	st.fwd.wg.Wait()
}

// openStrict serves the strict tags of alloc: leases in the leaders bucket
// of js, requests forwarded to the leader over nc (the service's
// connection), which the lead is fenced on, and served past gate.
func openStrict(ctx context.Context, cfg Config, log *slog.Logger, js jetstream.JetStream, nc *nats.Conn, alloc *segment.Allocator, gate func() error) (*strictTags, error) {
	var leaders *kv.Leaders
	if err := retryStartup(ctx, log, "open the strict tags' leaders bucket", func() (err error) {
		leaders, err = kv.OpenLeaders(ctx, js, cfg.StrictLeaseTTL, cfg.KVReplicas, instanceName())
		return err
	}); err != nil {
		return nil, err
	}
	if ttl := leaders.TTL(); ttl != cfg.StrictLeaseTTL {
		log.Warn("the leaders bucket has another TTL than LEAF_STRICT_LEASE_TTL: using the bucket's", "bucket_ttl", ttl, "configured", cfg.StrictLeaseTTL)
	}
	f := &forwarder{nc: nc, prefix: cfg.SubjectPrefix, queue: cfg.QueueGroup, log: log, gate: gate}
	sc := strict.Config{
		Source:  alloc,
		Lead:    leadWith(leaders),
		Forward: f.forward,
		Listen:  f.listen,
		Logger:  log,
	}
	if nc.ConnectedClusterName() == "" { // as the worker-ID keeper's fence
		sc.Fence = func() uint64 { return nc.Stats().Reconnects }
	}
	ls, err := strict.New(sc)
	if err != nil {
		return nil, err
	}
	f.leaders = ls
	return &strictTags{Leaders: ls, fwd: f}, nil
}

// leadWith takes leases in the leaders bucket, in package strict's terms.
func leadWith(leaders *kv.Leaders) func(context.Context, string) (strict.Lease, time.Time, error) {
	return func(ctx context.Context, tag string) (strict.Lease, time.Time, error) {
		l, err := leaders.Lead(ctx, tag)
		if errors.Is(err, kv.ErrLedElsewhere) {
			return nil, time.Time{}, fmt.Errorf("%w: %w", strict.ErrLedElsewhere, err)
		}
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("%w: take the lead of %q: %w", segment.ErrUnavailable, tag, err)
		}
		return kvLead{l}, l.NotBefore, nil
	}
}

// kvLead is a kv.Lead whose loss is strict.ErrLost.
type kvLead struct{ *kv.Lead }

func (l kvLead) Renew(ctx context.Context) (time.Time, error) {
	d, err := l.Lead.Renew(ctx)
	if errors.Is(err, kv.ErrLeadLost) {
		err = fmt.Errorf("%w: %w", strict.ErrLost, err)
	}
	return d, err
}

// forwarder passes strict tags' requests to their leaders over NATS, and
// answers them when this vendor leads.
type forwarder struct {
	nc      *nats.Conn
	prefix  string
	queue   string
	log     *slog.Logger
	gate    func() error
	leaders *strict.Leaders
	wg      sync.WaitGroup
}

var forwardHeader = nats.Header{vending.EncodingHeader: {vending.EncodingRanges}}

// forward asks the leader of tag for n IDs: ErrNoLeader when no vendor
// listens as its leader, or the one that does is too slow to answer (frozen,
// or cut off), so that the caller tries to take the lead, which the lease
// decides.
func (f *forwarder) forward(ctx context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	ctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	msg := &nats.Msg{Subject: strictSubject(f.prefix, tag), Header: forwardHeader, Data: strconv.AppendInt(nil, n, 10)}
	reply, err := f.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return dst, fmt.Errorf("%w: %s: %w", strict.ErrNoLeader, msg.Subject, err)
	case err != nil:
		return dst, fmt.Errorf("%w: forward to the leader of %q: %w", segment.ErrUnavailable, tag, err)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		c, _ := strconv.Atoi(code)
		return dst, &vending.Error{Code: c, Message: "the leader of the strict tag: " + reply.Header.Get(micro.ErrorHeader)}
	}
	rs, err := vending.DecodeRanges(nil, reply.Data)
	if err != nil || ids.Count(rs) != n {
		return dst, fmt.Errorf("%w: the leader of %q answered %d IDs for %d: %v", segment.ErrUnavailable, tag, ids.Count(rs), n, err)
	}
	for _, r := range rs {
		dst = append(dst, ids.Range{First: r.First, Count: r.Count})
	}
	return dst, nil
}

// listen answers the requests forwarded to this vendor as tag's leader.
// Requests it can serve from memory are answered on the subscription's
// goroutine, in order; those that wait for the store in goroutines of their
// own.
func (f *forwarder) listen(tag string) (func(), error) {
	sub, err := f.nc.QueueSubscribe(strictSubject(f.prefix, tag), f.queue, func(m *nats.Msg) {
		c, err := vending.ParseCount(m.Data, 1<<40)
		n := int64(c)
		if err == nil {
			err = f.gate()
		}
		if err != nil {
			f.respond(m, nil, err)
			return
		}
		rs, ok, err := f.leaders.TryTake(tag, nil, n)
		if ok || err != nil {
			f.respond(m, rs, err)
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), forwardTimeout)
			defer cancel()
			rs, err := f.leaders.Serve(ctx, tag, nil, n)
			f.respond(m, rs, err)
		}()
	})
	if err != nil {
		return nil, err
	}
	// The subscription is known to the server before the lead serves, so
	// that no forwarded request finds no responders meanwhile.
	if err := f.nc.Flush(); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	return func() { sub.Unsubscribe() }, nil
}

// respond answers a forwarded request with rs, or with err as the vending
// service would: its code and sentence.
func (f *forwarder) respond(m *nats.Msg, rs []ids.Range, err error) {
	r := &nats.Msg{Subject: m.Reply}
	if err != nil {
		if errors.Is(err, strict.ErrNotLeader) {
			err = fmt.Errorf("%w: %w; ask again", segment.ErrUnavailable, err)
		}
		r.Header = nats.Header{}
		r.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(vending.Code(err)))
		r.Header.Set(micro.ErrorHeader, err.Error())
	} else {
		r.Header = forwardHeader
		r.Data = vending.AppendRanges(nil, rs)
	}
	if err := f.nc.PublishMsg(r); err != nil {
		f.log.Warn("answering a forwarded strict request", "subject", m.Subject, "err", err)
	}
}
