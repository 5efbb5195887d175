package vending

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// later serves req in a goroutine of its own, which Close waits for: a
// request that waits (for the store, or for the clock) must not hold up
// the endpoint's one goroutine and every request behind it. Once Close has
// begun it serves req inline instead: the connection's drain waits for
// handlers, not for goroutines they started.
//
// micro counts a request when its handler returns, so it counts one served
// later once, as answered; an error it is answered with later is counted
// in leaf_requests_total but not in micro's num_errors.
func (s *Service) later(req micro.Request, serve func(micro.Request)) {
	if !s.slow.Go(func() { serve(detached{req, s.nc}) }) {
		serve(req)
	}
}

// detached answers a request after its handler has returned, publishing
// on the connection itself: micro reads a request's state (its error, for
// the stats) when the handler returns, so the request must not be written
// to after that.
type detached struct {
	micro.Request
	nc *nats.Conn
}

func (d detached) Respond(data []byte, opts ...micro.RespondOpt) error {
	return d.publish(&nats.Msg{Subject: d.Reply(), Data: data}, opts)
}

func (d detached) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Subject: d.Reply(), Data: data, Header: nats.Header{}}
	m.Header.Set(micro.ErrorHeader, description)
	m.Header.Set(micro.ErrorCodeHeader, code)
	return d.publish(m, opts)
}

func (d detached) publish(m *nats.Msg, opts []micro.RespondOpt) error {
	for _, o := range opts {
		o(m)
	}
	return d.nc.PublishMsg(m)
}
