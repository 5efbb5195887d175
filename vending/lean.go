package vending

import (
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// LeanWeight is how many members a strict tag's leader adds to the service's
// queue group on its tag's subject (lean). NATS gives a request to one
// member of the group at random, so with v vendors the leader receives
// about (LeanWeight+1)/(LeanWeight+v) of the tag's requests itself, 90% with
// three: those are answered without the hop to it through another vendor.
const LeanWeight = 16

// leanCheck is how often a leaning vendor checks that it still leans
// (Segments.Leans) and serves segments; until it stops leaning, the
// requests it takes for a tag it no longer leads are served as any
// vendor's are (handed to the leader), only slower.
const leanCheck = 250 * time.Millisecond

// leans are the tags this vendor leans towards: a strict tag's leader
// takes most of its requests on subscriptions of its own (lean), which
// micro's stats do not count (leaf_requests_total does).
type leans struct {
	mu      sync.Mutex
	tags    map[string]chan struct{} // closed to stop leaning
	stopped bool
	wg      sync.WaitGroup
}

// lean makes this vendor take most of strict tag's requests itself: it
// serves the tag from memory as its leader, and other vendors pass it the
// tag's requests (Segments.Leans; alone, it has nothing to gain). It lasts
// until the vendor no longer leans or serves segments, or the service
// closes. It returns at once.
func (s *Service) lean(tag string) {
	l := &s.leans
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.tags[tag] != nil {
		return
	}
	if l.tags == nil {
		l.tags = map[string]chan struct{}{}
	}
	stop := make(chan struct{})
	l.tags[tag] = stop
	l.wg.Go(func() { s.leanOn(tag, stop) })
}

// leanOn subscribes LeanWeight members of the queue group to tag's subject,
// all delivering to one goroutine with one handler, as micro's endpoint
// does, and drains them (every request they received is answered) when the
// lead or the segments end, or stop closes.
func (s *Service) leanOn(tag string, stop chan struct{}) {
	defer s.forget(tag, stop)
	in := make(chan *nats.Msg, leanPending)
	var subs []*nats.Subscription
	for range LeanWeight {
		sub, err := s.nc.ChanQueueSubscribe(s.cfg.Prefix+".segment."+tag, s.cfg.QueueGroup, in)
		if err != nil {
			s.log.Warn("taking a strict tag's requests directly as its leader", "tag", tag, "err", err)
			break
		}
		subs = append(subs, sub)
	}
	h := s.guard(ModeSegment, &segmentHandler{s: s, src: s.cfg.Segments, prefix: s.cfg.Prefix + ".segment.", leaning: true})
	serve := func(m *nats.Msg) { h.Handle(msgRequest{m, s.nc}) }
	tick := time.NewTicker(leanCheck)
	defer tick.Stop()
	for len(subs) == LeanWeight {
		select {
		case m := <-in:
			serve(m)
		case <-stop:
			subs = drain(subs, in, serve)
		case <-tick.C:
			if !s.cfg.Segments.Leans(tag) || !s.Serving().Segments {
				subs = drain(subs, in, serve)
			}
		}
	}
	drain(subs, in, serve)
}

// leanPending is how many requests a lean holds for its goroutine; more
// are dropped (a slow consumer), as micro's endpoint drops past its limits.
const leanPending = 1 << 16

// drain drains subs, serving what they deliver to in until they are
// closed (at most leanDrain), and returns none.
func drain(subs []*nats.Subscription, in chan *nats.Msg, serve func(*nats.Msg)) []*nats.Subscription {
	for _, sub := range subs {
		sub.Drain()
	}
	deadline := time.NewTimer(leanDrain)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case m := <-in:
			serve(m)
			continue
		case <-deadline.C:
			return nil
		case <-tick.C:
		}
		// Closed first: a closed subscription delivers nothing more.
		if !slices.ContainsFunc(subs, (*nats.Subscription).IsValid) && len(in) == 0 {
			return nil
		}
	}
}

// leanDrain bounds a lean's drain: the round trip to the server that
// delivers what it sent before the unsubscribe.
const leanDrain = 5 * time.Second

// forget ends tag's lean in the table, if stop is still its.
func (s *Service) forget(tag string, stop chan struct{}) {
	l := &s.leans
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tags[tag] == stop {
		delete(l.tags, tag)
	}
}

// unlean stops leaning towards tag.
func (s *Service) unlean(tag string) {
	l := &s.leans
	l.mu.Lock()
	defer l.mu.Unlock()
	if stop := l.tags[tag]; stop != nil {
		close(stop)
		delete(l.tags, tag)
	}
}

// stopLeaning stops every lean, lets no new one start, and waits until
// their subscriptions drained.
func (s *Service) stopLeaning() {
	l := &s.leans
	l.mu.Lock()
	l.stopped = true
	for tag, stop := range l.tags {
		close(stop)
		delete(l.tags, tag)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// msgRequest is a request received on a lean's subscription, answered on
// the connection as micro would answer it (detached).
type msgRequest struct {
	m  *nats.Msg
	nc *nats.Conn
}

func (r msgRequest) Data() []byte           { return r.m.Data }
func (r msgRequest) Headers() micro.Headers { return micro.Headers(r.m.Header) }
func (r msgRequest) Subject() string        { return r.m.Subject }
func (r msgRequest) Reply() string          { return r.m.Reply }

func (r msgRequest) Respond(data []byte, opts ...micro.RespondOpt) error {
	return detached{r, r.nc}.Respond(data, opts...)
}

func (r msgRequest) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	return detached{r, r.nc}.Error(code, description, data, opts...)
}

func (r msgRequest) RespondJSON(v any, opts ...micro.RespondOpt) error {
	b, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return r.Respond(b, opts...)
}
