package vending_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// switchable is a Readiness whose snowflake mode tests turn on and off.
type switchable struct{ snowflake atomic.Bool }

func (r *switchable) Modes() (bool, bool) { return r.snowflake.Load(), true }

// refusing is a snowflake source that cannot vend: no worker ID.
type refusing struct{}

func (refusing) NextRanges(dst []ids.Range, _ int) ([]ids.Range, error) {
	return dst, snowflake.ErrNoLease
}

// A service that cannot serve a mode for LeaveAfter leaves its queue group,
// so that every request goes to the vendors that can, and joins it again
// once it can.
func TestUnservableModeIsLeft(t *testing.T) {
	s := natstest.Server(t)
	g, _ := snowflake.New(snowflake.Settings{WorkerID: 1})
	good, err := vending.Open(natstest.Conn(t, s), vending.Config{Snowflake: g, Segments: newCounterSegments("order")})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close(context.Background())
	ready := &switchable{}
	bad, err := vending.Open(natstest.Conn(t, s), vending.Config{Snowflake: refusing{}, Segments: newCounterSegments("order"), Readiness: ready})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close(context.Background())

	waitServing := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(3 * vending.LeaveAfter); bad.Serving().Snowflake != want; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("serving snowflake: %v, want %v", bad.Serving().Snowflake, want)
			}
		}
	}
	waitServing(false)
	nc := natstest.Conn(t, s)
	for i := range 50 {
		msg, err := nc.Request("leaf.snowflake", nil, 5*time.Second)
		if err != nil || msg.Header.Get(micro.ErrorCodeHeader) != "" {
			t.Fatalf("request %d after the unservable vendor left: %v %v %q", i, err, msg.Header, msg.Data)
		}
	}
	if !bad.Serving().Segments {
		t.Fatal("the mode it can serve was left too")
	}
	ready.snowflake.Store(true)
	waitServing(true)
	ready.snowflake.Store(false) // no longer servable: left after LeaveAfter
	waitServing(false)
}
