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
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.CheckReadiness()
	}
}

// CheckReadiness asks Config.Readiness which modes the vendor can serve,
// and serves them, leaving those it has not been able to serve for
// LeaveAfter. The readiness loop calls it every followCheck; a vendor calls
// it too when it knows a mode just became servable (its worker ID
// claimed), so that it does not wait for the loop.
func (s *Service) CheckReadiness() {
	if s.cfg.Readiness == nil {
		return
	}
	s.followMu.Lock()
	defer s.followMu.Unlock()
	want := s.wanted(time.Now())
	if want == s.Serving() {
		return
	}
	if err := s.serve(want); err != nil {
		s.log.Warn("changing the modes served", "err", err)
		return
	}
	s.log.Info("modes served changed: a mode this vendor cannot serve is left to the vendors that can",
		"snowflake", want.Snowflake, "segments", want.Segments)
}

// wanted is the modes to serve, as Config.Readiness says now. s.followMu
// is held.
func (s *Service) wanted(now time.Time) Modes {
	sf, sg := s.cfg.Readiness.Modes()
	if sf {
		s.since[0] = now
	}
	if sg {
		s.since[1] = now
	}
	// A mode never servable yet is not joined: a vendor starting in a
	// region joins snowflake once it holds a worker ID.
	return Modes{
		Snowflake: s.cfg.Snowflake != nil && !s.since[0].IsZero() && now.Sub(s.since[0]) < LeaveAfter,
		Segments:  s.cfg.Segments != nil && !s.since[1].IsZero() && now.Sub(s.since[1]) < LeaveAfter,
	}
}

// Serving returns the modes the service answers now.
func (s *Service) Serving() Modes {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serving
}
