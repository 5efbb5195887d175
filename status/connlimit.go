package status

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit caps the connections an http.Server holds, so that a client
// opening connections and leaving them idle (or trickling a request) cannot
// use up the file descriptors the vendor and its embedded NATS server share.
// Past the cap, a new connection closes the oldest one that is not serving
// a request (idle between requests, or not yet sent its request); when
// every one is serving, the new one is closed at once. Connections serving
// a request are bounded by the server's read and write timeouts.
type connLimit struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]connState
}

type connState struct {
	state http.ConnState
	since time.Time
}

func newConnLimit(ln net.Listener, max int) *connLimit {
	return &connLimit{Listener: ln, max: max, conns: map[net.Conn]connState{}}
}

// Accept makes room for each connection it returns.
func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.makeRoom() {
			return c, nil
		}
		c.Close() // every connection is serving a request
	}
}

// makeRoom closes the oldest connection not serving a request if the cap
// is reached; false when there is none to close.
func (l *connLimit) makeRoom() bool {
	l.mu.Lock()
	if len(l.conns) < l.max {
		l.mu.Unlock()
		return true
	}
	var oldest net.Conn
	var since time.Time
	for c, s := range l.conns {
		if s.state != http.StateActive && (oldest == nil || s.since.Before(since)) {
			oldest, since = c, s.since
		}
	}
	if oldest != nil {
		delete(l.conns, oldest) // the server's closed state finds it gone
	}
	l.mu.Unlock()
	if oldest == nil {
		return false
	}
	oldest.Close()
	return true
}

// track is the server's ConnState hook.
func (l *connLimit) track(c net.Conn, state http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	default:
		l.conns[c] = connState{state, time.Now()}
	}
}

// open returns how many connections are held.
func (l *connLimit) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}
