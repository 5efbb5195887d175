package cluster

import "sync"

// callbacks tracks the NATS callbacks of a subscription in flight, so that
// a close waits for them; a callback that starts after the close does
// nothing. (Unsubscribe does not wait for a callback already running.)
type callbacks struct {
	mu     sync.Mutex // orders wg.Add against close
	closed bool
	wg     sync.WaitGroup
}

// enter starts a callback; false once closed, when it must return at once.
// A callback that entered calls exit when done.
func (c *callbacks) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

func (c *callbacks) exit() { c.wg.Done() }

// close refuses new callbacks; wait waits for those in flight.
func (c *callbacks) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

func (c *callbacks) wait() { c.wg.Wait() }
