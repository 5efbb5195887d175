package main

import (
	"log/slog"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/snowflake"
)

// A vendor does not ask for the stats of the vendors while its own service
// starts: micro would answer the ask while it still writes the service's
// start time (a data race in nats.go's micro.AddService).
func TestNoAskWhileTheServiceStarts(t *testing.T) {
	s := natstest.Server(t)
	a := newPeerAsker(natstest.Conn(t, s), slog.New(slog.DiscardHandler))
	asks, err := natstest.Conn(t, s).SubscribeSync(statsSubject)
	if err != nil {
		t.Fatal(err)
	}
	starting, release := make(chan struct{}), make(chan struct{})
	quiet := make(chan error, 1)
	go func() {
		quiet <- a.quiet(func() error {
			close(starting)
			<-release
			return nil
		})
	}()
	<-starting
	asked := make(chan error, 1)
	go func() {
		asked <- a.ask(t.Context(), 10*time.Millisecond, snowflake.SystemClock{}, func([]byte, time.Time, time.Time) {})
	}()
	if msg, err := asks.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("asked %s while the service was starting", msg.Subject)
	}
	close(release)
	if err := <-quiet; err != nil {
		t.Fatal(err)
	}
	if _, err := asks.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("no ask once the service had started: %v", err)
	}
	if err := <-asked; err != nil {
		t.Fatal(err)
	}
}
