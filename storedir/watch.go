package storedir

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// WatchEvery is how often a Watch looks at the store directory.
const WatchEvery = time.Second

// ErrGone is wrapped by Watch.Err once the store is gone.
var ErrGone = errors.New("embedded NATS store gone")

// Server is the embedded server as a Watch sees it: *server.Server.
type Server interface {
	JetStreamEnabled() bool
	JetStreamConfig() *server.JetStreamConfig
}

// Watch tells when the embedded store a vendor runs on is gone: its
// directory, its JetStream directory or its lock file deleted or replaced,
// or its server's JetStream stopped. It also writes the record again when
// it is deleted. The
// server then still answers from what it holds in memory and open files,
// and writes to files that no one will read back: what the vendor hands
// out from then on is recorded nowhere a restart finds it. Once gone, it
// stays gone: only a restart starts on a store again.
type Watch struct {
	r     *Record
	files []watched
	srv   Server
	fix   string
	log   *slog.Logger
	err   atomic.Pointer[error] // nil while the store is there

	stop chan struct{}
	done chan struct{}
}

// watched is a file or directory as it was when the Watch began.
type watched struct {
	what, path string
	was        os.FileInfo
}

// Watch starts watching the store of r, served by srv, whose lock file is
// lockFile (natsserver.StoreLock.Path); Close stops it.
func (r *Record) Watch(srv Server, lockFile string, log *slog.Logger) (*Watch, error) {
	w := &Watch{r: r, srv: srv, log: log, stop: make(chan struct{}), done: make(chan struct{}),
		fix: "restart the vendor: it starts a new store in " + r.storeDir + ", above the IDs recorded in " + r.path}
	for _, f := range []struct{ what, path string }{
		{"the store directory", r.storeDir},
		{"its JetStream directory", srv.JetStreamConfig().StoreDir},
		{"its lock file", lockFile},
	} {
		fi, err := os.Stat(f.path)
		if err != nil {
			return nil, fmt.Errorf("storedir: watch %s: %w", f.what, err)
		}
		w.files = append(w.files, watched{f.what, f.path, fi})
	}
	go w.run()
	return w, nil
}

// Err returns why the store cannot be vended from, nil while it can (and
// from a nil Watch: no embedded store).
func (w *Watch) Err() error {
	if w == nil {
		return nil
	}
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Close stops watching and waits for the loop.
func (w *Watch) Close() {
	close(w.stop)
	<-w.done
}

func (w *Watch) run() {
	defer close(w.done)
	t := time.NewTicker(WatchEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.keepRecord()
		if w.err.Load() != nil {
			continue // gone for good; the record is still kept
		}
		why := w.look()
		if why == "" {
			continue
		}
		err := fmt.Errorf("%w: %s; this vendor does not vend from a store that keeps nothing; %s", ErrGone, why, w.fix)
		w.err.Store(&err)
		w.log.Error("embedded NATS store gone: not vending", "store_dir", w.files[0].path, "why", why, "fix", w.fix)
	}
}

// keepRecord writes the record again from memory when its file is gone
// (rm -rf leaf-data*): the next start needs it, and this vendor still
// knows what it holds.
func (w *Watch) keepRecord() {
	again, err := w.r.rewrite()
	switch {
	case err != nil:
		w.log.Error("the record of IDs handed out is gone and cannot be written again: nothing is served until it is", "record", w.r.path, "err", err)
	case again:
		w.log.Warn("the record of IDs handed out was deleted: written again from what this vendor holds", "record", w.r.path)
	}
}

// look says what of the store is gone, "" when nothing is.
func (w *Watch) look() string {
	for _, f := range w.files {
		fi, err := os.Stat(f.path)
		switch {
		case err != nil:
			return fmt.Sprintf("%s %s: %v", f.what, f.path, errors.Unwrap(err))
		case !os.SameFile(fi, f.was):
			return fmt.Sprintf("%s %s was replaced", f.what, f.path)
		}
	}
	if !w.srv.JetStreamEnabled() {
		return "the embedded server's JetStream has stopped (a write to " + w.files[0].path + " failed?)"
	}
	return ""
}
