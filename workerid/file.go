package workerid

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leaf-nats/leaf/snowflake"
)

// FileHolder keeps a statically configured worker ID (Leaf's local mode). It
// records the worker ID's last timestamp in a file, so that a restart never
// vends a millisecond an earlier run may have used. Like a lease, each Renew
// reserves a short horizon ahead and records it before the generator may use
// it; Release records the true last millisecond.
type FileHolder struct {
	id       int
	path     string
	clock    snowflake.Clock
	horizon  time.Duration
	last     int64 // recorded when opened
	recorded int64 // the highest timestamp written
}

var _ Holder = (*FileHolder)(nil)

// OpenFile reads path (missing means no earlier run) and returns the holder
// of worker ID id. horizon is how far ahead each Renew reserves; renew at a
// fraction of it.
func OpenFile(path string, id int, clock snowflake.Clock, horizon time.Duration) (*FileHolder, error) {
	if clock == nil {
		clock = snowflake.SystemClock{}
	}
	h := &FileHolder{id: id, path: path, clock: clock, horizon: horizon}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return h, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read worker timestamp file: %w", err)
	}
	last, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || last < 0 {
		return nil, fmt.Errorf("worker timestamp file %s is corrupt (%q); remove it only if no process used this worker ID in the last minutes", path, b)
	}
	h.last, h.recorded = last, last
	return h, nil
}

// ID returns the worker ID.
func (h *FileHolder) ID() int { return h.id }

// Last returns the timestamp the file held when it was opened.
func (h *FileHolder) Last() int64 { return h.last }

// Where returns the file's path.
func (h *FileHolder) Where() string { return h.path }

// Renew records the later of now+horizon, last and what it recorded
// before, and returns now+horizon as the deadline.
func (h *FileHolder) Renew(_ context.Context, last int64) (time.Time, error) {
	deadline := h.clock.Now().Add(h.horizon)
	rec := max(deadline.UnixMilli(), last, h.recorded)
	if err := h.write(rec); err != nil {
		return time.Time{}, err
	}
	h.recorded = rec
	return deadline, nil
}

// Release records last.
func (h *FileHolder) Release(_ context.Context, last int64) error { return h.write(last) }

// write replaces the file atomically and durably: a torn or lost write must
// never lower the recorded timestamp.
func (h *FileHolder) write(ms int64) error {
	dir := filepath.Dir(h.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("worker timestamp file: %w", err)
	}
	f, err := os.CreateTemp(dir, ".worker-ts-*")
	if err != nil {
		return fmt.Errorf("worker timestamp file: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(strconv.FormatInt(ms, 10) + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("worker timestamp file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("worker timestamp file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("worker timestamp file: %w", err)
	}
	if err := os.Rename(f.Name(), h.path); err != nil {
		return fmt.Errorf("worker timestamp file: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
