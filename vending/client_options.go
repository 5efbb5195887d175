package vending

import (
	"errors"
	"fmt"
	"time"
)

// Client defaults, for the zero fields of ClientConfig.
const (
	DefaultClientTimeout = time.Second
	DefaultRetries       = 3
	DefaultBackoffMin    = 20 * time.Millisecond
	DefaultBackoffMax    = time.Second
)

// ClientConfig configures a Client.
//
// As every configuration in this module, it is a plain struct in which the
// zero value of a field means its default, checked as a whole by
// NewClient, which names every bad field in one error. A struct shows at
// one glance what a client was built with, and a Go literal of it reads
// like the README's table.
type ClientConfig struct {
	// Prefix is the subject prefix, as LEAF_SUBJECT_PREFIX for the
	// workers. Default "leaf".
	Prefix string
	// Timeout bounds each request attempt. Default 1s. The context passed
	// to Next bounds the whole call, retries included.
	Timeout time.Duration
	// Retries is how many times a request is retried after a 503, a
	// timeout or no responders; 400, 404 and 500 replies are returned at
	// once. Default 3; negative means none.
	Retries int
	// BackoffMin and BackoffMax are the wait before the first retry and its
	// cap (defaults 20ms and 1s). The wait doubles with every retry and is
	// jittered down to half its length, so clients turned away together do
	// not return together.
	BackoffMin, BackoffMax time.Duration
	// MaxBatch is the largest count one request may ask for, the workers'
	// LEAF_MAX_BATCH: for snowflake IDs, and NextN. Default 10000. Larger
	// counts are refused locally.
	MaxBatch int
	// MaxRangeBatch is the largest count of segment IDs one request may ask
	// for in the ranges encoding, the workers' LEAF_MAX_RANGE_BATCH.
	// Default 1,000,000,000.
	MaxRangeBatch int
	// Prefetch, when above 0, makes Next and Block serve IDs from a local
	// buffer of that size: when it holds LowWater IDs or fewer, one
	// background refill asks for Prefetch more in the ranges encoding, so
	// they do not touch the network while the service keeps up. A
	// snowflake refill asks for at most MaxBatch; a segment refill for up
	// to MaxRangeBatch, which costs a few bytes on the wire whatever its
	// size.
	//
	// Prefetched IDs are taken before they are used: IDs in the buffer when
	// the process exits are never vended again, and snowflake IDs are as
	// old as their refill.
	//
	// A strict tag (its replies carry StrictHeader) is never buffered:
	// IDs taken early would be behind those other consumers take meanwhile.
	// Its Next and Block make one request each, as without prefetch; the
	// first strict reply drops what the buffer held.
	Prefetch int
	// LowWater is the refill mark, below Prefetch. Default Prefetch/4.
	LowWater int
}

// withDefaults fills in the defaults and checks c, naming every bad field.
func (c ClientConfig) withDefaults() (ClientConfig, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultClientTimeout
	}
	switch {
	case c.Retries == 0:
		c.Retries = DefaultRetries
	case c.Retries < 0:
		c.Retries = 0
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(DefaultBackoffMax, c.BackoffMin)
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxRangeBatch == 0 {
		c.MaxRangeBatch = max(DefaultMaxRangeBatch, c.MaxBatch)
	}
	if c.Prefetch > 0 && c.LowWater == 0 {
		c.LowWater = c.Prefetch / 4
	}
	var errs []error
	if err := ValidatePrefix(c.Prefix); err != nil {
		errs = append(errs, err)
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v is negative", c.Timeout))
	}
	if c.BackoffMin < 0 || c.BackoffMax < c.BackoffMin {
		errs = append(errs, fmt.Errorf("backoff %v..%v must be positive and ascending", c.BackoffMin, c.BackoffMax))
	}
	if c.MaxBatch < 0 {
		errs = append(errs, fmt.Errorf("max batch %d must be at least 1", c.MaxBatch))
	}
	if c.MaxRangeBatch < c.MaxBatch {
		errs = append(errs, fmt.Errorf("max range batch %d must be at least the max batch %d", c.MaxRangeBatch, c.MaxBatch))
	}
	if c.Prefetch < 0 || c.Prefetch > c.MaxRangeBatch {
		errs = append(errs, fmt.Errorf("prefetch size %d must be from 1 to the max range batch %d", c.Prefetch, c.MaxRangeBatch))
	}
	if c.Prefetch > 0 && (c.LowWater < 0 || c.LowWater >= c.Prefetch) {
		errs = append(errs, fmt.Errorf("prefetch low-water mark %d must be from 0 to below the size %d", c.LowWater, c.Prefetch))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("vending: client config: %w", err)
	}
	return c, nil
}
