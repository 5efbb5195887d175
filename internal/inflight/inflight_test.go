package inflight

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Close waits for a goroutine started with Go and for work that entered,
// however long they take.
func TestCloseWaitsForWorkInFlight(t *testing.T) {
	var g Group
	release := make(chan struct{})
	var finished, exited atomic.Bool
	if !g.Go(func() {
		<-release
		finished.Store(true)
	}) {
		t.Fatal("Go refused before Stop")
	}
	if !g.Enter() {
		t.Fatal("Enter refused before Stop")
	}
	go func() {
		<-release
		exited.Store(true)
		g.Exit()
	}()
	g.Stop()
	close(release)
	g.Wait()
	if !finished.Load() || !exited.Load() {
		t.Fatalf("Wait returned with work in flight: goroutine done %v, entered work done %v", finished.Load(), exited.Load())
	}
}

// Once Stop has begun nothing starts, Stopping is closed, and Stop and
// Close may be called again.
func TestStopRefusesNewWork(t *testing.T) {
	var g Group
	stopping := g.Stopping() // asked for before Stop: the same channel
	select {
	case <-stopping:
		t.Fatal("Stopping closed before Stop")
	default:
	}
	if g.Stopped() {
		t.Fatal("Stopped before Stop")
	}
	g.Close()
	g.Stop()
	g.Close()
	if !g.Stopped() {
		t.Fatal("not Stopped after Close")
	}
	<-stopping
	<-g.Stopping()
	if g.Enter() {
		t.Fatal("Enter after Stop")
	}
	ran := false
	if g.Go(func() { ran = true }) {
		t.Fatal("Go after Stop")
	}
	g.Wait()
	if ran {
		t.Fatal("Go ran f after Stop")
	}
}

// Work racing Close either starts and is waited for, or is refused; the
// race detector checks that no Add races the Wait.
func TestEnterRacingClose(t *testing.T) {
	var g Group
	var entered, left atomic.Int64
	var start sync.WaitGroup
	start.Add(1)
	var callers sync.WaitGroup
	for range 8 {
		callers.Go(func() {
			start.Wait()
			for range 100 {
				if g.Enter() {
					entered.Add(1)
					left.Add(1)
					g.Exit()
				}
				g.Go(func() { entered.Add(1); left.Add(1) })
			}
		})
	}
	start.Done()
	g.Close()
	if entered.Load() != left.Load() {
		t.Fatalf("Close returned with work in flight: %d entered, %d left", entered.Load(), left.Load())
	}
	callers.Wait()
}
