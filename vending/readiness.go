package vending

import "time"

// Modes are the kinds of requests a service answers: snowflake IDs, and
// segment IDs. Decoding needs no state and is always answered.
type Modes struct {
	Snowflake, Segments bool
}

// Readiness says which modes a vendor can serve now (status.State).
type Readiness interface {
	Modes() (snowflake, segments bool)
}

// A vendor that cannot serve a mode (no worker ID, its store down with no
// buffers) answers its requests 503; NATS keeps sending them, since it
// subscribes. In a supercluster that keeps a region's requests in the
// region while every vendor there answers 503, though another region
// could serve them: NATS sends a queue group's requests to another cluster
// only when none of its members is in the requester's. So a service with
// Config.Readiness leaves the queue group of a mode it has not been able
// to serve for LeaveAfter, and joins it again as soon as it can.

// LeaveAfter is how long a mode must have been unservable before the
// service stops answering it: longer than the blips of a lease renewal or
// a store's failover.
const LeaveAfter = 3 * time.Second

// followCheck is how often the readiness loop looks.
const followCheck = 250 * time.Millisecond

// followReadiness is the readiness loop: it runs until Close.
func (s *Service) followReadiness() {
	t := time.NewTicker(followCheck)
	defer t.Stop()
	var since [2]time.Time // when each mode was last servable
	now := time.Now()
	since[0], since[1] = now, now
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		sf, sg := s.cfg.Readiness.Modes()
		if sf {
			since[0] = now
		}
		if sg {
			since[1] = now
		}
		want := Modes{
			Snowflake: s.cfg.Snowflake != nil && now.Sub(since[0]) < LeaveAfter,
			Segments:  s.cfg.Segments != nil && now.Sub(since[1]) < LeaveAfter,
		}
		s.mu.Lock()
		was := s.serving
		s.mu.Unlock()
		if want == was {
			continue
		}
		if err := s.serve(want); err != nil {
			s.log.Warn("changing the modes served", "err", err)
			continue
		}
		s.log.Info("modes served changed: a mode this vendor cannot serve is left to the vendors that can",
			"snowflake", want.Snowflake, "segments", want.Segments)
	}
}

// Serving returns the modes the service answers now.
func (s *Service) Serving() Modes {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serving
}
