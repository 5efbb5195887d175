package segment

import (
	"testing"
	"time"
)

func TestDynamicStepRule(t *testing.T) {
	tests := []struct {
		name                   string
		step, minStep, maxStep int64
		lasted, took           time.Duration
		want                   int64
	}{
		{"busy doubles", 1000, 1000, 1_000_000, time.Minute, 0, 2000},
		{"busy capped", 800_000, 1000, 1_000_000, time.Minute, 0, 1_000_000},
		{"busy at cap", 1_000_000, 1000, 1_000_000, 0, 0, 1_000_000},
		{"15 minutes keeps", 4000, 1000, 1_000_000, 15 * time.Minute, 0, 4000},
		{"29 minutes keeps", 4000, 1000, 1_000_000, 29 * time.Minute, 0, 4000},
		{"30 minutes halves", 4000, 1000, 1_000_000, 30 * time.Minute, 0, 2000},
		{"idle floored at the row's step", 1500, 1000, 1_000_000, time.Hour, 0, 1000},
		{"row step above the cap wins", 2_000_000, 2_000_000, 1_000_000, time.Minute, 0, 2_000_000},
		// 1000 IDs in 35ms is 28,571/s; four loads of 200ms use 22,857.
		{"slow store: cover four loads", 1000, 1000, 1_000_000, 35 * time.Millisecond, 200 * time.Millisecond, 22_857},
		{"slow store: capped", 1000, 1000, 1_000_000, time.Millisecond, time.Second, 1_000_000},
		{"fast store: Leaf's rule", 1000, 1000, 1_000_000, time.Second, time.Millisecond, 2000},
		{"idle on a slow store still halves", 4000, 1000, 1_000_000, time.Hour, time.Second, 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dynamicStep(tt.step, tt.minStep, tt.maxStep, tt.lasted, tt.took); got != tt.want {
				t.Fatalf("dynamicStep(%d, %d, %d, %v, %v) = %d, want %d", tt.step, tt.minStep, tt.maxStep, tt.lasted, tt.took, got, tt.want)
			}
		})
	}
}
