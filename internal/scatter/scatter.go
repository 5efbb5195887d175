// Package scatter asks every vendor listening on a subject one question
// and gathers the answers that arrive in time (NATS's scatter-gather): the
// vendors' safety exchange, their segment marks, and the micro stats of
// the status page's cluster table all ask this way.
//
// A question NATS refuses (the user may not publish on its subject) is not
// an error of the publish: the server answers it later with an
// asynchronous error, and no vendor hears it, so a refused question looks
// like a cluster of one. Ask flushes after gathering and looks for that
// refusal (package natsperm). An Asker, which asks one subject again and
// again, also says so once and asks no more for AskAgainAfter, so that
// neither this vendor's log nor the server's grows with every ask.
package scatter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/natsperm"
)

// ErrRefused is wrapped by the error of a question NATS refuses.
var ErrRefused = errors.New("no permission to ask the other vendors")

// AskAgainAfter is how long an Asker whose question NATS refused asks no
// more: the permission may be granted by a configuration reload, and each
// refusal is an error in the server's log.
const AskAgainAfter = time.Minute

// flushWait bounds the flush that brings NATS's refusal of a question.
const flushWait = time.Second

// Clock is what a question's wait is measured on.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Question is one question to every vendor: its body, and how long its
// answers are waited for.
type Question struct {
	Body []byte
	// Wait bounds the gathering. It ends sooner, Grace after the question
	// was sent, once Enough reports true (nil: never), so that the answers
	// of vendors not expected still have Grace to arrive.
	Wait, Grace time.Duration
	Enough      func() bool
	// Clock measures the wait and stamps the answers; nil: the system's.
	// A clock stepped back waits no longer than Wait.
	Clock Clock
}

// Answer is one vendor's answer, and when its question was sent and the
// answer arrived, by the question's clock.
type Answer struct {
	Data          []byte
	Sent, Arrived time.Time
}

// Ask asks every vendor listening on subject q on nc, and passes each
// answer that arrives within q's wait to each, in order, on the caller's
// goroutine. Its error wraps ErrRefused when NATS refused the question;
// each has then been passed nothing.
func Ask(ctx context.Context, nc *nats.Conn, subject string, q Question, each func(Answer)) error {
	_, err := ask(ctx, nc, subject, q, each)
	return err
}

// ask is Ask; checked is false when it could not tell whether NATS
// refused the question.
func ask(ctx context.Context, nc *nats.Conn, subject string, q Question, each func(Answer)) (checked bool, err error) {
	clock := q.Clock
	if clock == nil {
		clock = systemClock{}
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return false, err
	}
	defer sub.Unsubscribe()
	since := natsperm.Now(nc)
	sent := clock.Now()
	if err := nc.PublishRequest(subject, inbox, q.Body); err != nil {
		return false, err
	}
	start := clock.Now()
	for {
		waited := max(clock.Now().Sub(start), 0)
		left := q.Wait - waited
		if q.Enough != nil && q.Enough() {
			left = min(left, q.Grace-waited)
		}
		if left <= 0 {
			break
		}
		msg, err := next(ctx, sub, left)
		if err != nil {
			break // the deadline: everyone who answers in time has
		}
		each(Answer{Data: msg.Data, Sent: sent, Arrived: clock.Now()})
	}
	// The server sends its refusal of the question before its answer to
	// this flush.
	if err := nc.FlushTimeout(flushWait); err != nil {
		return false, nil // unknown: as if allowed
	}
	if r, ok := since.Refused(); ok && r.Publishes(subject) {
		return true, refused(subject)
	}
	return true, nil
}

func refused(subject string) error {
	return fmt.Errorf("%w: NATS refuses this vendor's user to publish on %s; grant it (docs/security.md)", ErrRefused, subject)
}

func next(ctx context.Context, sub *nats.Subscription, wait time.Duration) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return sub.NextMsgWithContext(ctx)
}

// AskerConfig configures an Asker; Conn and Subject are required.
type AskerConfig struct {
	Conn    *nats.Conn
	Subject string
	// What names the questions in the log: "questions to the other
	// vendors".
	What string
	// Lost says, in the log, what goes unseen while NATS refuses them.
	Lost   string
	Logger *slog.Logger
}

// Asker asks one subject again and again. While NATS refuses its
// question, it says so once and asks no more for AskAgainAfter: it
// answers the refusal at once instead.
type Asker struct {
	cfg AskerConfig

	mu          sync.Mutex
	deniedUntil time.Time // zero while allowed
}

// NewAsker returns an Asker of c.
func NewAsker(c AskerConfig) *Asker {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Asker{cfg: c}
}

// Ask is Ask on the Asker's connection and subject; while it holds off
// after a refusal, it returns the refusal without asking.
func (a *Asker) Ask(ctx context.Context, q Question, each func(Answer)) error {
	if q.Clock == nil {
		q.Clock = systemClock{}
	}
	if a.holdingOff(q.Clock.Now()) {
		return refused(a.cfg.Subject)
	}
	checked, err := ask(ctx, a.cfg.Conn, a.cfg.Subject, q, each)
	switch {
	case errors.Is(err, ErrRefused):
		a.denied(q.Clock.Now())
	case checked:
		a.allowed()
	}
	return err
}

func (a *Asker) holdingOff(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.deniedUntil.IsZero() && now.Before(a.deniedUntil)
}

func (a *Asker) denied(now time.Time) {
	a.mu.Lock()
	first := a.deniedUntil.IsZero()
	a.deniedUntil = now.Add(AskAgainAfter)
	a.mu.Unlock()
	if first {
		a.cfg.Logger.Warn("NATS refuses this vendor's "+a.cfg.What, "subject", a.cfg.Subject, "lost", a.cfg.Lost,
			"hint", "grant this vendor's NATS user publish on "+a.cfg.Subject+" (docs/security.md)", "ask_again_every", AskAgainAfter)
	}
}

func (a *Asker) allowed() {
	a.mu.Lock()
	was := !a.deniedUntil.IsZero()
	a.deniedUntil = time.Time{}
	a.mu.Unlock()
	if was {
		a.cfg.Logger.Info("NATS lets this vendor's "+a.cfg.What+" through again", "subject", a.cfg.Subject)
	}
}
