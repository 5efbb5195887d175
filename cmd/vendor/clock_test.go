//go:build !e2e

package main

import (
	"log/slog"
	"testing"

	"github.com/leaf-nats/leaf/snowflake"
)

// The binary users run has no clock hooks: the variables the fault tests
// set are not even read.
func TestProductionClockIgnoresTestHooks(t *testing.T) {
	t.Setenv("LEAF_TEST_CLOCK_OFFSET", "-10s")
	t.Setenv("LEAF_TEST_CLOCK_OFFSET_FILE", "/nonexistent")
	clock, stop, err := newClock(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, ok := clock.(snowflake.SystemClock); !ok {
		t.Fatalf("the production build's clock is %T, want snowflake.SystemClock", clock)
	}
}
