package main

import (
	"os"
	"testing"
)

// TestMain gives the vendors these tests start a one-second lease TTL
// unless a test sets another: on a new NATS server a worker ID is vended
// with only a TTL after its bucket was created (it cannot be told from a
// server that lost its JetStream state), and 30s per test is too long.
func TestMain(m *testing.M) {
	os.Setenv("LEAF_WORKER_LEASE_TTL", "1s")
	os.Exit(m.Run())
}
