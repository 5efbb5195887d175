//go:build e2e

// The fault tests (test/e2e) build the vendor with -tags e2e to step its
// snowflake clock from outside. Nothing of this is in the binary users run.

package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/leaf-nats/leaf/internal/config"
	"github.com/leaf-nats/leaf/snowflake"
)

// clockHooks are the e2e build's settings: LEAF_TEST_CLOCK_OFFSET shifts the
// clock; LEAF_TEST_CLOCK_OFFSET_FILE holds a shift (e.g. -10s) re-read every
// 20ms, to step a running vendor's clock.
type clockHooks struct {
	Offset time.Duration `envconfig:"TEST_CLOCK_OFFSET"`
	File   string        `envconfig:"TEST_CLOCK_OFFSET_FILE"`
}

// newClock returns the system clock shifted as the hooks say, and a
// function that stops following the offset file.
func newClock(log *slog.Logger) (snowflake.Clock, func(), error) {
	var h clockHooks
	if err := envconfig.Process(config.EnvPrefix, &h); err != nil {
		return nil, nil, err
	}
	c := &offsetClock{}
	c.d.Store(int64(h.Offset))
	log.Warn("test build: the snowflake clock follows LEAF_TEST_CLOCK_OFFSET(_FILE)", "offset", h.Offset, "file", h.File)
	if h.File == "" {
		return c, func() {}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.follow(ctx, h.File, log)
	}()
	return c, func() { cancel(); <-done }, nil
}

// offsetClock is the system clock shifted by an offset. time.Time.Add keeps
// the monotonic reading, so lease deadlines stay immune to the shift.
type offsetClock struct{ d atomic.Int64 }

func (c *offsetClock) Now() time.Time        { return time.Now().Add(time.Duration(c.d.Load())) }
func (c *offsetClock) Sleep(d time.Duration) { snowflake.SystemClock{}.Sleep(d) }

// follow sets the offset from path every 20ms until ctx ends.
func (c *offsetClock) follow(ctx context.Context, path string, log *slog.Logger) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil && int64(d) != c.d.Load() {
				c.d.Store(int64(d))
				log.Warn("clock offset changed (test hook)", "offset", d)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
