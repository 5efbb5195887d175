package backoff

import (
	"testing"
	"time"
)

func TestBackoffDoublesUpToMaxAndResets(t *testing.T) {
	b := Backoff{Min: 250 * time.Millisecond, Max: time.Second}
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, time.Second}
	for i, w := range want {
		if got := b.Next(); got != w {
			t.Fatalf("wait %d: %v, want %v", i, got, w)
		}
	}
	b.Reset()
	if got := b.Next(); got != 250*time.Millisecond {
		t.Fatalf("after Reset: %v, want the minimum", got)
	}
}

func TestBackoffDefaults(t *testing.T) {
	cases := []struct {
		name      string
		b         Backoff
		first, to time.Duration
	}{
		{"zero", Backoff{}, DefaultMin, DefaultMax},
		{"max below min", Backoff{Min: time.Second, Max: time.Millisecond}, time.Second, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.b.Next(); got != c.first {
				t.Fatalf("first wait %v, want %v", got, c.first)
			}
			var last time.Duration
			for range 20 {
				last = c.b.Next()
			}
			if last != c.to {
				t.Fatalf("waits end at %v, want %v", last, c.to)
			}
		})
	}
}
