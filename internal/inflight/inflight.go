// Package inflight tracks the work a component has in flight, so that its
// Close can refuse new work and wait for what is under way: the goroutines
// it starts (Go) and the calls into it that it does not start itself, such
// as NATS subscription callbacks and HTTP requests (Enter, Exit).
//
// A bare sync.WaitGroup cannot do this: an Add that races a Wait is a bug,
// and NATS's Unsubscribe does not wait for a callback already running. So
// Group decides under one lock whether work may start, and once Stop has
// begun it never lets any start again. (errgroup.Group has the same race:
// its Go after Wait is not refused.)
package inflight

import "sync"

// Group is work in flight that Close waits for. The zero value is ready;
// a Group must not be copied after first use.
type Group struct {
	mu      sync.Mutex // orders wg.Add against Stop
	stopped bool
	stop    chan struct{} // closed by Stop; made on first need
	wg      sync.WaitGroup
}

// Enter starts a piece of work on the caller's goroutine; false once Stop
// has begun, when the caller must not do it. Work that entered calls Exit
// when done.
func (g *Group) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	g.wg.Add(1)
	return true
}

// Exit ends a piece of work that Enter started.
func (g *Group) Exit() { g.wg.Done() }

// Go runs f in a goroutine that Wait waits for; false, with f not run,
// once Stop has begun.
func (g *Group) Go(f func()) bool {
	if !g.Enter() {
		return false
	}
	go func() {
		defer g.Exit()
		f()
	}()
	return true
}

// Stop refuses new work and closes Stopping. It does not wait: callers
// that must act between the refusal and the wait (unsubscribe, cancel)
// call Wait after. Stop may be called more than once.
func (g *Group) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	g.stopped = true
	if g.stop == nil {
		g.stop = make(chan struct{})
	}
	close(g.stop)
}

// Stopped reports whether Stop has begun.
func (g *Group) Stopped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopped
}

// Stopping returns a channel that Stop closes: work in flight that waits
// selects on it to give up its wait.
func (g *Group) Stopping() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stop == nil {
		g.stop = make(chan struct{})
	}
	return g.stop
}

// Wait waits for the work in flight. Call it after Stop: work that starts
// while Wait waits is a misuse of the WaitGroup beneath.
func (g *Group) Wait() { g.wg.Wait() }

// Close refuses new work and waits for the work in flight.
func (g *Group) Close() {
	g.Stop()
	g.Wait()
}
