package throttle

import (
	"testing"
	"time"
)

// One line an interval gets through, with the count of those held back;
// the interval is read on the times given, not the system's clock.
func TestLinesOnePerInterval(t *testing.T) {
	var l Lines // DefaultEvery
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at   time.Duration
		ok   bool
		held int
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{DefaultEvery - time.Millisecond, false, 0},
		{DefaultEvery, true, 2},
		{DefaultEvery + time.Second, false, 0},
		{5 * DefaultEvery, true, 1},
		{5 * DefaultEvery, false, 0},
	}
	for i, s := range steps {
		held, ok := l.Allow(t0.Add(s.at))
		if ok != s.ok || held != s.held {
			t.Fatalf("step %d at +%v: %d held, let through %v; want %d, %v", i, s.at, held, ok, s.held, s.ok)
		}
	}
}

func TestLinesEvery(t *testing.T) {
	l := Lines{Every: time.Minute}
	t0 := time.Unix(1000, 0)
	if _, ok := l.Allow(t0); !ok {
		t.Fatal("the first line held back")
	}
	if _, ok := l.Allow(t0.Add(DefaultEvery)); ok {
		t.Fatal("a line let through before Every")
	}
	if held, ok := l.Allow(t0.Add(time.Minute)); !ok || held != 1 {
		t.Fatalf("after Every: %d held, let through %v", held, ok)
	}
}
