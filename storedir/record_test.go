package storedir_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/storedir"
)

var _ segment.Lowerer = (*storedir.Record)(nil)

// openRecord opens the record of a store directory in a fresh temporary
// directory and closes it when the test ends.
func openRecord(t *testing.T, storeDir string) *storedir.Record {
	t.Helper()
	r, err := storedir.Open(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// The record keeps each tag's mark beside the store, on disk before Record
// returns: raised only, lowered only from the mark it had, and read back by
// the next vendor and by tags add (HandedOut), after the store directory
// itself is gone.
func TestRecordKeepsMarks(t *testing.T) {
	ctx := context.Background()
	storeDir := filepath.Join(t.TempDir(), "leaf-data")
	r := openRecord(t, storeDir)
	if m, _ := r.Mark(ctx, "order"); m != 0 {
		t.Fatalf("mark of a tag never recorded: %d, want 0", m)
	}
	for _, end := range []int64{101, 50, 201} {
		if err := r.Record(ctx, "order", end); err != nil {
			t.Fatal(err)
		}
	}
	if m, _ := r.Mark(ctx, "order"); m != 201 {
		t.Fatalf("mark %d after 101, 50 and 201; want 201, never lowered", m)
	}
	if done, err := r.Lower(ctx, "order", 150, 120); done || err != nil {
		t.Fatalf("lowered from a mark it does not have: %v, %v", done, err)
	}
	if done, err := r.Lower(ctx, "order", 201, 180); !done || err != nil {
		t.Fatalf("Lower(201 -> 180): %v, %v", done, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(storeDir); err != nil {
		t.Fatal(err)
	}
	mark, path, err := storedir.HandedOut(storeDir, "order")
	if err != nil || mark != 180 || filepath.Dir(filepath.Dir(path)) != filepath.Dir(storeDir) {
		t.Fatalf("HandedOut after the store was deleted: %d, %s, %v; want 180 from a file beside the store", mark, path, err)
	}
	again := openRecord(t, storeDir)
	if m, _ := again.Mark(ctx, "order"); m != 180 {
		t.Fatalf("mark read back: %d, want 180", m)
	}
}

// The record's lock outlives the store directory: a second vendor on a
// directory deleted under the first is refused.
func TestRecordLockOutlivesStore(t *testing.T) {
	storeDir := filepath.Join(t.TempDir(), "leaf-data")
	openRecord(t, storeDir)
	if err := os.RemoveAll(storeDir); err != nil {
		t.Fatal(err)
	}
	_, err := storedir.Open(storeDir)
	if !errors.Is(err, natsserver.ErrStoreInUse) || !strings.Contains(err.Error(), "stop that vendor first") {
		t.Fatalf("second Open of a held record: %v, want ErrStoreInUse", err)
	}
}

// A record that cannot be believed is refused with what to do, never read
// as empty (which would start every tag over).
func TestCorruptRecordRefused(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"empty", ""},
		{"cut short", `{"version":1,"store_dir":"x","segments":{"order":`},
		{"other version", `{"version":2,"store_dir":"x","segments":{}}`},
		{"no segments", `{"version":1,"store_dir":"x"}`},
		{"unknown field", `{"version":1,"store_dir":"x","segments":{},"extra":1}`},
		{"mark below 1", `{"version":1,"store_dir":"x","segments":{"order":0}}`},
		{"bad tag", `{"version":1,"store_dir":"x","segments":{"a*b":5}}`},
		{"trailing data", `{"version":1,"store_dir":"x","segments":{}} {}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storeDir := filepath.Join(t.TempDir(), "leaf-data")
			dir, err := storedir.RecordDir(storeDir)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "handed-out.json"), []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = storedir.Open(storeDir)
			if !errors.Is(err, storedir.ErrCorrupt) || !strings.Contains(err.Error(), "mv ") {
				t.Fatalf("Open: %v, want ErrCorrupt with the command that moves it aside", err)
			}
			if _, _, err := storedir.HandedOut(storeDir, "order"); !errors.Is(err, storedir.ErrCorrupt) {
				t.Fatalf("HandedOut: %v, want ErrCorrupt", err)
			}
		})
	}
}

// A store directory that is a file system's root has no beside.
func TestRecordOfRootRefused(t *testing.T) {
	if _, err := storedir.Open("/"); err == nil || !strings.Contains(err.Error(), "root") {
		t.Fatalf("Open(/): %v, want a refusal naming the root", err)
	}
}

// Concurrent records share writes, and the file ends with the highest.
func TestRecordConcurrent(t *testing.T) {
	ctx := context.Background()
	storeDir := filepath.Join(t.TempDir(), "leaf-data")
	r := openRecord(t, storeDir)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				if err := r.Record(ctx, "t"+strconv.Itoa(g%2), int64(1+i*8+g)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for tag, want := range map[string]int64{"t0": 1 + 19*8 + 6, "t1": 1 + 19*8 + 7} {
		if got, _, err := storedir.HandedOut(storeDir, tag); got != want || err != nil {
			t.Errorf("%s on disk: %d, %v; want %d", tag, got, err, want)
		}
	}
}

// An allocation recorded before it committed and then not committed (a
// lost compare-and-set) is taken back off the record, unless another
// recorded since holds it up; one committed stays.
func TestRecordSettle(t *testing.T) {
	ctx := context.Background()
	r := openRecord(t, filepath.Join(t.TempDir(), "leaf-data"))
	mark := func(want int64, what string) {
		t.Helper()
		if m, _ := r.Mark(ctx, "order"); m != want {
			t.Fatalf("%s: mark %d, want %d", what, m, want)
		}
	}
	r.Record(ctx, "order", 100)
	r.Settle("order", 100, true)
	r.Record(ctx, "order", 200)
	r.Settle("order", 200, false)
	mark(100, "after a lost allocation up to 200")
	r.Record(ctx, "order", 300)
	r.Record(ctx, "order", 400)
	r.Settle("order", 400, false)
	mark(300, "after a lost allocation up to 400, one up to 300 unsettled")
	r.Settle("order", 300, true)
	mark(300, "after the allocation up to 300 committed")
	r.Record(ctx, "fresh", 50)
	r.Settle("fresh", 50, false)
	if m, _ := r.Mark(ctx, "fresh"); m != 0 {
		t.Fatalf("a tag whose only allocation was lost: mark %d, want 0", m)
	}
}
