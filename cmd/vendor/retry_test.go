package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A start-up step retries NATS not answering in time for as long as it
// lasts (a fresh cluster electing its buckets' leaders can take longer than
// any budget), gives an unknown error up after the budget, and a permanent
// one at once.
func TestStartupRetries(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	const budget = 250 * time.Millisecond
	cases := []struct {
		name      string
		err       error
		wantTries int // at least; 1: no retry
		wantErr   bool
	}{
		{"no leader yet, then served", fmt.Errorf("kv: open bucket leaf_workers: %w", context.DeadlineExceeded), 5, false},
		{"no responders, then served", fmt.Errorf("kv: read: %w", nats.ErrNoResponders), 5, false},
		{"unknown error", errors.New("something new"), 2, true},
		{"permanent", fmt.Errorf("%w: no", errDenied), 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tries := 0
			var reasons []error
			start := time.Now()
			err := retrying(t.Context(), log, func(_ string, why error) {
				if why != nil {
					reasons = append(reasons, why)
				}
			}, "open a bucket", budget, func() error {
				tries++
				// Transient errors last past the budget, then the step works.
				if transient(c.err) && time.Since(start) > 4*budget {
					return nil
				}
				return c.err
			})
			if (err != nil) != c.wantErr || tries < c.wantTries || c.wantTries == 1 && tries != 1 {
				t.Fatalf("%d tries, err %v; want at least %d tries, an error %v", tries, err, c.wantTries, c.wantErr)
			}
			if tries > 1 && len(reasons) != tries-1 {
				t.Fatalf("/readyz told %d reasons for %d retries", len(reasons), tries-1)
			}
		})
	}
}
