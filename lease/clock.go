package lease

import (
	"context"
	"time"
)

// Clock is what a Driver reads the time from and waits on. Deadlines are
// read on it, so it is the clock the holder's deadlines are measured by
// (the snowflake generator's, for worker IDs). A simulation injects one
// whose alarms go off as simulated time passes.
type Clock interface {
	Now() time.Time
	// NewAlarm returns the alarm a driver waits on.
	NewAlarm() Alarm
}

// Alarm is a driver's one wait.
type Alarm interface {
	// Wait returns once the clock reads until (never, for a zero until),
	// once Ring was called since the last Wait returned, or when ctx ends.
	Wait(ctx context.Context, until time.Time)
	// Ring ends the Wait in progress, or the next one, at once. Safe for
	// concurrent use.
	Ring()
}

// Nower is a source of time: a snowflake.Clock, for one.
type Nower interface {
	Now() time.Time
}

// Timers is a Clock of real timers, on the time now reads (nil: the
// system's). A timer waits the duration from now to the alarm's time, as
// time.Timer does: a clock stepped meanwhile does not move it.
func Timers(now Nower) Clock {
	if now == nil {
		now = systemTime{}
	}
	return timers{now}
}

type timers struct{ Nower }

func (t timers) NewAlarm() Alarm { return &timerAlarm{now: t.Nower, ring: make(chan struct{}, 1)} }

type systemTime struct{}

func (systemTime) Now() time.Time { return time.Now() }

type timerAlarm struct {
	now  Nower
	ring chan struct{}
}

func (a *timerAlarm) Wait(ctx context.Context, until time.Time) {
	var fire <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(until.Sub(a.now.Now()))
		defer t.Stop()
		fire = t.C
	}
	select {
	case <-ctx.Done():
	case <-fire:
	case <-a.ring:
	}
}

func (a *timerAlarm) Ring() {
	select {
	case a.ring <- struct{}{}:
	default:
	}
}
