package status

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit caps the connections an http.Server holds, so that a client
// opening connections and leaving them idle (or trickling a request) cannot
// use up the file descriptors the vendor and its embedded NATS server share.
// Past the cap, a new connection closes the oldest one that is not serving
// a request (idle between requests, or not yet sent its request).
//
// When every one is serving (readers that do not read, pipelined
// requests), the new connection goes to a few more kept for health checks:
// a liveness probe must never find the door shut, or the vendor is
// restarted for the load it bears. They are answered /healthz and /readyz
// only, once each, which costs microseconds and fits any socket buffer, so
// a real probe holds one for a moment; the oldest gives way to a new one,
// so that connections that stall there cannot hold the room either.
// Connections serving a request are bounded by the server's time-outs.
type connLimit struct {
	net.Listener
	max, spare int

	mu     sync.Mutex
	conns  map[net.Conn]connState
	probes int // of conns, those in the room kept for health checks
}

type connState struct {
	state http.ConnState
	since time.Time
	probe bool
}

// probeConn is a connection accepted into the room kept for health checks.
type probeConn struct{ net.Conn }

// CloseWrite lets the server end its one answer gracefully, as on a
// *net.TCPConn.
func (c *probeConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// healthOnly says whether a request came on a connection kept for health
// checks (the server's ConnContext marks it).
func healthOnly(ctx context.Context) bool {
	probe, _ := ctx.Value(probeKey{}).(bool)
	return probe
}

type probeKey struct{}

// connContext is the server's ConnContext hook.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if _, ok := c.(*probeConn); ok {
		return context.WithValue(ctx, probeKey{}, true)
	}
	return ctx
}

func newConnLimit(ln net.Listener, max, spare int) *connLimit {
	return &connLimit{Listener: ln, max: max, spare: spare, conns: map[net.Conn]connState{}}
}

// Accept makes room for each connection it returns.
func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		switch ok, probe := l.makeRoom(); {
		case ok && probe:
			return &probeConn{c}, nil
		case ok:
			return c, nil
		}
		c.Close() // not reached while spare > 0
	}
}

// makeRoom finds a place for a new connection, closing the one it takes
// the place of: false when there is none; probe when the place is one
// kept for health checks.
func (l *connLimit) makeRoom() (ok, probe bool) {
	l.mu.Lock()
	victim, ok, probe := l.place()
	if victim != nil {
		l.remove(victim) // the server's closed state finds it gone
	}
	l.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	return ok, probe
}

// place says where a new connection goes and which one it replaces (nil:
// none); l.mu is held.
func (l *connLimit) place() (victim net.Conn, ok, probe bool) {
	if len(l.conns)-l.probes < l.max {
		return nil, true, false
	}
	if c := l.oldest(false); c != nil {
		return c, true, false
	}
	if l.probes < l.spare {
		return nil, true, true
	}
	c := l.oldest(true)
	return c, c != nil, true
}

// oldest returns the oldest connection kept for health checks (probe), or
// the oldest other one not serving a request; nil when there is none.
// l.mu is held.
func (l *connLimit) oldest(probe bool) net.Conn {
	var oldest net.Conn
	var since time.Time
	for c, s := range l.conns {
		if s.probe == probe && (probe || s.state != http.StateActive) && (oldest == nil || s.since.Before(since)) {
			oldest, since = c, s.since
		}
	}
	return oldest
}

// remove forgets c; l.mu is held.
func (l *connLimit) remove(c net.Conn) {
	if s, ok := l.conns[c]; ok {
		delete(l.conns, c)
		if s.probe {
			l.probes--
		}
	}
}

// track is the server's ConnState hook.
func (l *connLimit) track(c net.Conn, state http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateClosed, http.StateHijacked:
		l.remove(c)
	case http.StateNew:
		_, probe := c.(*probeConn)
		l.conns[c] = connState{state, time.Now(), probe}
		if probe {
			l.probes++
		}
	default:
		if s, ok := l.conns[c]; ok { // gone when closed to make room
			l.conns[c] = connState{state, time.Now(), s.probe}
		}
	}
}

// open returns how many connections are held, those kept for health
// checks included.
func (l *connLimit) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}
