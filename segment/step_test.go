package segment

import (
	"testing"
	"time"
)

func TestDynamicStepRule(t *testing.T) {
	tests := []struct {
		name                   string
		step, minStep, maxStep int64
		lasted                 time.Duration
		want                   int64
	}{
		{"busy doubles", 1000, 1000, 1_000_000, time.Minute, 2000},
		{"busy capped", 800_000, 1000, 1_000_000, time.Minute, 1_000_000},
		{"busy at cap", 1_000_000, 1000, 1_000_000, 0, 1_000_000},
		{"15 minutes keeps", 4000, 1000, 1_000_000, 15 * time.Minute, 4000},
		{"29 minutes keeps", 4000, 1000, 1_000_000, 29 * time.Minute, 4000},
		{"30 minutes halves", 4000, 1000, 1_000_000, 30 * time.Minute, 2000},
		{"idle floored at the row's step", 1500, 1000, 1_000_000, time.Hour, 1000},
		{"row step above the cap wins", 2_000_000, 2_000_000, 1_000_000, time.Minute, 2_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dynamicStep(tt.step, tt.minStep, tt.maxStep, tt.lasted); got != tt.want {
				t.Fatalf("dynamicStep(%d, %d, %d, %v) = %d, want %d", tt.step, tt.minStep, tt.maxStep, tt.lasted, got, tt.want)
			}
		})
	}
}
