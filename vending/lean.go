package vending

import (
	"encoding/json"
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

// leanCheck is how often a leaning vendor checks that it still leads the
// tag and serves segments; until it stops leaning, the requests it takes
// for a tag it no longer leads are served as any vendor's are (handed to
// the leader), only slower.
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

// lean makes this vendor, which serves strict tag from memory as its
// leader, take most of the tag's requests itself, until it no longer leads
// it or serves segments, or the service closes. It returns at once.
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
// each with a handler of its own, and drains them (every request they
// received is answered) when the lead or the segments end, or stop closes.
func (s *Service) leanOn(tag string, stop chan struct{}) {
	defer s.forget(tag, stop)
	subject := s.cfg.Prefix + ".segment." + tag
	var subs []*nats.Subscription
	defer func() {
		for _, sub := range subs {
			sub.Drain()
		}
	}()
	for range LeanWeight {
		h := s.guard(ModeSegment, &segmentHandler{s: s, src: s.cfg.Segments, prefix: s.cfg.Prefix + ".segment.", leaning: true})
		sub, err := s.nc.QueueSubscribe(subject, s.cfg.QueueGroup, func(m *nats.Msg) { h.Handle(msgRequest{m, s.nc}) })
		if err != nil {
			s.log.Warn("taking a strict tag's requests directly as its leader", "tag", tag, "err", err)
			return
		}
		subs = append(subs, sub)
	}
	tick := time.NewTicker(leanCheck)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if !s.cfg.Segments.Leads(tag) || !s.Serving().Segments {
				return
			}
		}
	}
}

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
