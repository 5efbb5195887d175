//go:build !e2e

package main

import (
	"log/slog"

	"github.com/leaf-nats/leaf/snowflake"
)

// newClock returns the snowflake clock, the system's, and a function that
// stops it. The fault tests' build (-tags e2e, clock_e2e.go) returns one
// they can step instead.
func newClock(*slog.Logger) (snowflake.Clock, func(), error) {
	return snowflake.SystemClock{}, func() {}, nil
}
