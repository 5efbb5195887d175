package storedir

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaf-nats/leaf/internal/testtool"
)

// fakeServer is the embedded server as a Watch sees it.
type fakeServer struct {
	jsDir   string
	stopped atomic.Bool
}

var _ Server = (*fakeServer)(nil)

func (f *fakeServer) JetStreamEnabled() bool { return !f.stopped.Load() }
func (f *fakeServer) JetStreamConfig() *server.JetStreamConfig {
	return &server.JetStreamConfig{StoreDir: f.jsDir}
}

// watchStore opens a record and watches its store, a directory with a
// JetStream directory and a lock file in it.
func watchStore(t *testing.T) (*Watch, *fakeServer, string) {
	t.Helper()
	storeDir := filepath.Join(t.TempDir(), "leaf-data")
	r, err := Open(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	srv := &fakeServer{jsDir: filepath.Join(storeDir, "jetstream")}
	lock := filepath.Join(storeDir, "leaf-vendor.lock")
	if err := os.MkdirAll(srv.jsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := r.Watch(srv, lock, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w, srv, storeDir
}

// A Watch tells what of the store is gone: deleted, replaced, or its
// JetStream stopped; and then Err says so with the fix, for good.
func TestWatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(t *testing.T, srv *fakeServer, storeDir string)
		want string
	}{
		{"store deleted", func(t *testing.T, _ *fakeServer, dir string) { os.RemoveAll(dir) }, "the store directory"},
		{"JetStream directory deleted", func(t *testing.T, srv *fakeServer, _ string) { os.RemoveAll(srv.jsDir) }, "its JetStream directory"},
		{"store replaced", func(t *testing.T, _ *fakeServer, dir string) {
			// A copy put in its place: every file is there, none the same.
			other := dir + ".copy"
			os.MkdirAll(filepath.Join(other, "jetstream"), 0o755)
			os.WriteFile(filepath.Join(other, "leaf-vendor.lock"), nil, 0o644)
			os.RemoveAll(dir)
			if err := os.Rename(other, dir); err != nil {
				t.Fatal(err)
			}
		}, "was replaced"},
		{"lock file deleted", func(t *testing.T, _ *fakeServer, dir string) { os.Remove(filepath.Join(dir, "leaf-vendor.lock")) }, "its lock file"},
		{"JetStream stopped", func(t *testing.T, srv *fakeServer, _ string) { srv.stopped.Store(true) }, "JetStream has stopped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, srv, storeDir := watchStore(t)
			if why := w.look(); why != "" || w.Err() != nil {
				t.Fatalf("intact store: %q, %v", why, w.Err())
			}
			tc.do(t, srv, storeDir)
			if why := w.look(); !strings.Contains(why, tc.want) {
				t.Fatalf("look: %q, want %q", why, tc.want)
			}
			testtool.Eventually(t, 10*WatchEvery, "the watch to see it", func() bool { return w.Err() != nil })
			err := w.Err()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "restart the vendor") {
				t.Fatalf("Err: %v, want the store gone (%q) with the fix", err, tc.want)
			}
		})
	}
	if (*Watch)(nil).Err() != nil {
		t.Fatal("a nil Watch (no embedded store) refuses")
	}
}

// A record deleted under a running vendor, with its store or not, is
// written again from memory: the restart the vendor asks for needs it.
func TestWatchKeepsRecord(t *testing.T) {
	w, _, storeDir := watchStore(t)
	if err := w.r.Record(t.Context(), "order", 501); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(storeDir + ".record"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(storeDir); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, 10*WatchEvery, "the record written again", func() bool {
		mark, _, err := HandedOut(storeDir, "order")
		return err == nil && mark == 501
	})
	testtool.Eventually(t, 10*WatchEvery, "the store gone", func() bool { return w.Err() != nil })
}
