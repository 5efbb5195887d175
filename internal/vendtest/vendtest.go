// Package vendtest holds what tests of the wire share: an Observer that
// records what it is told, and requests that fail the test when NATS does
// not answer.
package vendtest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/vending"
)

// Recorder is a vending.Observer that records the codes, IDs and drops it
// is told of.
type Recorder struct {
	mu    sync.Mutex
	codes []int
	ids   int
	drops []string
}

var _ vending.Observer = (*Recorder)(nil)

func (r *Recorder) Dropped(mode, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drops = append(r.drops, mode+": "+why)
}

// Drops returns the drops so far, as "mode: why".
func (r *Recorder) Drops() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.drops)
}

func (r *Recorder) Observe(_, _ string, code, ids int, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.codes = append(r.codes, code)
	r.ids += ids
}

// Seen returns the codes and the number of IDs observed once there are n
// codes, or after five seconds: the observer hears of a request just after
// its reply has gone.
func (r *Recorder) Seen(n int) (codes []int, ids int) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		codes, ids = slices.Clone(r.codes), r.ids
		r.mu.Unlock()
		if len(codes) >= n || time.Now().After(deadline) {
			return codes, ids
		}
	}
}

// Request asks subject with body and returns the reply, failing the test
// when none comes within five seconds.
func Request(t testing.TB, nc *nats.Conn, subject, body string) *nats.Msg {
	t.Helper()
	msg, err := nc.Request(subject, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatalf("request %s %q: %v", subject, body, err)
	}
	return msg
}

// RequestEnc is Request asking for the reply in encoding enc.
func RequestEnc(t testing.TB, nc *nats.Conn, subject, enc, body string) *nats.Msg {
	t.Helper()
	req := nats.NewMsg(subject)
	req.Header.Set(vending.EncodingHeader, enc)
	req.Data = []byte(body)
	msg, err := nc.RequestMsg(req, 5*time.Second)
	if err != nil {
		t.Fatalf("request %s %q in %s: %v", subject, body, enc, err)
	}
	return msg
}
