package testtool

import (
	"testing"
	"time"
)

// Eventually waits until cond holds, failing the test after timeout. Tests
// synchronise this way, on a condition with a deadline, never on a bare
// sleep.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// Within reports whether cond holds before timeout, polling it every 5 ms.
func Within(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
