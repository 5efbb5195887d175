package storedir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/segment"
)

// recordName is the record's file in the record's directory.
const recordName = "handed-out.json"

// ErrCorrupt is wrapped by the error of a record that cannot be believed.
var ErrCorrupt = errors.New("storedir: the record of IDs handed out is corrupt")

// Record is what a vendor handed out from the embedded store in one
// directory, kept beside that directory: each segment tag's mark. Open holds it for one vendor at a time. It is
// safe for concurrent use.
type Record struct {
	storeDir string // absolute
	path     string // the record's file
	lock     *natsserver.StoreLock

	mu    sync.Mutex // guards c, gen and saved
	c     contents
	gen   uint64 // changes made to c
	saved uint64 // the last of them on disk

	write sync.Mutex // one write at a time; the others wait and find theirs done

	// unsettled holds, per tag, the allocations recorded before they
	// committed and not settled yet: each one's end, and the mark before it.
	unsettled map[string][]unsettled
}

// unsettled is an allocation recorded before it committed.
type unsettled struct{ end, before int64 }

var (
	_ segment.Marks   = (*Record)(nil)
	_ segment.Lowerer = (*Record)(nil)
)

// RecordDir returns the directory of the record of the store in storeDir:
// <storeDir>.record beside it, out of reach of an rm -rf of storeDir.
func RecordDir(storeDir string) (string, error) {
	_, dir, err := paths(storeDir)
	return dir, err
}

// paths returns storeDir made absolute and its record's directory.
func paths(storeDir string) (abs, dir string, err error) {
	abs, err = filepath.Abs(storeDir)
	if err != nil {
		return "", "", fmt.Errorf("storedir: %w", err)
	}
	if filepath.Dir(abs) == abs {
		return "", "", fmt.Errorf("storedir: LEAF_NATS_STORE_DIR %s is a file system's root: the record of what the vendor handed out is kept beside the store, "+
			"so give the store a directory of its own", storeDir)
	}
	return abs, abs + ".record", nil
}

// Open locks and reads the record of the store in storeDir, creating its
// directory when missing; a record that does not exist yet is empty. While
// another process holds it, the error wraps natsserver.ErrStoreInUse: that
// vendor still runs on storeDir, even if storeDir was deleted under it. A
// record that cannot be believed wraps ErrCorrupt and says what to do.
func Open(storeDir string) (*Record, error) {
	abs, dir, err := paths(storeDir)
	if err != nil {
		return nil, err
	}
	lock, err := natsserver.LockStore(dir)
	if errors.Is(err, natsserver.ErrStoreInUse) {
		return nil, fmt.Errorf("%w: the record %s of LEAF_NATS_STORE_DIR %s is held by another vendor, which still runs on it even if the directory was deleted under it: stop that vendor first",
			natsserver.ErrStoreInUse, dir, storeDir)
	}
	if err != nil {
		return nil, fmt.Errorf("storedir: lock the record: %w", err)
	}
	r := &Record{storeDir: abs, path: filepath.Join(dir, recordName), lock: lock}
	if r.c, err = read(r.path, r.storeDir); err != nil {
		lock.Close()
		return nil, err
	}
	removeTemps(dir)
	return r, nil
}

// HandedOut returns how far tag's IDs were handed out from the embedded
// store in storeDir, as its record says (0: it knows of none), and the
// record's file. It does not lock the record: a vendor may be running and
// writing it, and each of its writes replaces the file whole.
func HandedOut(storeDir, tag string) (mark int64, path string, err error) {
	abs, dir, err := paths(storeDir)
	if err != nil {
		return 0, "", err
	}
	path = filepath.Join(dir, recordName)
	c, err := read(path, abs)
	return c.Segments[tag], path, err
}

// Path returns the record's file.
func (r *Record) Path() string { return r.path }

// StoreDir returns the store directory the record is of, absolute.
func (r *Record) StoreDir() string { return r.storeDir }

// Close releases the record for another vendor.
func (r *Record) Close() error { return r.lock.Close() }

// Mark returns how far tag's IDs were handed out, as recorded: 0 when
// never (segment.Marks).
func (r *Record) Mark(_ context.Context, tag string) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c.Segments[tag], nil
}

// Record raises tag's mark to end and returns once it is on disk
// (segment.Marks); it never lowers one.
func (r *Record) Record(_ context.Context, tag string, end int64) error {
	return r.change(func(c *contents) bool {
		if r.unsettled == nil {
			r.unsettled = map[string][]unsettled{}
		}
		r.unsettled[tag] = append(r.unsettled[tag], unsettled{end: end, before: c.Segments[tag]})
		if end <= c.Segments[tag] {
			return false
		}
		c.Segments[tag] = end
		return true
	})
}

// Settle ends an allocation Record recorded before it committed: one that
// did not commit (a lost compare-and-set) is taken back off the record
// when nothing recorded since is above what was there before it, so that
// the next allocation does not read the store as gone back. A write that
// fails leaves the record high, which skips IDs, never repeats one.
func (r *Record) Settle(tag string, end int64, committed bool) {
	_ = r.change(func(c *contents) bool {
		list := r.unsettled[tag]
		i := slices.IndexFunc(list, func(u unsettled) bool { return u.end == end })
		if i < 0 {
			return false
		}
		u := list[i]
		list = slices.Delete(list, i, i+1)
		if len(list) == 0 {
			delete(r.unsettled, tag)
		} else {
			r.unsettled[tag] = list
		}
		if committed || c.Segments[tag] != end {
			return false
		}
		to := u.before
		for _, o := range list {
			to = max(to, o.end)
		}
		switch {
		case to >= end:
			return false
		case to < 1:
			delete(c.Segments, tag)
		default:
			c.Segments[tag] = to
		}
		return true
	})
}

// Lower sets tag's mark to to if it is from (segment.Lowerer): the IDs
// above to were given back to the store at a clean stop.
func (r *Record) Lower(_ context.Context, tag string, from, to int64) (bool, error) {
	done := false
	err := r.change(func(c *contents) bool {
		if c.Segments[tag] != from || to < 1 || to > from {
			return false
		}
		c.Segments[tag], done = to, true
		return true
	})
	return done && err == nil, err
}

// change applies f to the record and returns once the record on disk holds
// what f left, and every change made before it (f returns whether it
// changed anything). Concurrent changes share writes: each write carries
// every change made when it began.
func (r *Record) change(f func(*contents) bool) error {
	r.mu.Lock()
	if f(&r.c) {
		r.gen++
	}
	want := r.gen
	r.mu.Unlock()

	r.write.Lock()
	defer r.write.Unlock()
	r.mu.Lock()
	if r.saved >= want {
		r.mu.Unlock()
		return nil
	}
	gen := r.gen
	b, err := r.c.encode()
	r.mu.Unlock()
	if err == nil {
		err = writeFile(r.path, b)
	}
	if err != nil {
		return fmt.Errorf("storedir: write the record of IDs handed out (nothing is served until it is written): %w", err)
	}
	r.mu.Lock()
	r.saved = max(r.saved, gen)
	r.mu.Unlock()
	return nil
}

// rewrite writes the record whole again if its file is gone, and says
// whether it did.
func (r *Record) rewrite() (bool, error) {
	r.write.Lock()
	defer r.write.Unlock()
	if _, err := os.Stat(r.path); !errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	r.mu.Lock()
	b, err := r.c.encode()
	gen := r.gen
	r.mu.Unlock()
	if err == nil {
		err = os.MkdirAll(filepath.Dir(r.path), 0o755)
	}
	if err == nil {
		err = writeFile(r.path, b)
	}
	if err != nil {
		return false, fmt.Errorf("storedir: write the record of IDs handed out again: %w", err)
	}
	r.mu.Lock()
	r.saved = max(r.saved, gen)
	r.mu.Unlock()
	return true, nil
}

// read reads the record at path, of the store in storeDir: empty when
// there is none yet.
func read(path, storeDir string) (contents, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return newContents(storeDir), nil
	}
	if err != nil {
		return contents{}, fmt.Errorf("storedir: read the record of IDs handed out: %w", err)
	}
	c, err := decode(b)
	if err != nil {
		return contents{}, fmt.Errorf("%w: %s: %v. It keeps how far the vendor on %s handed IDs out, above which a wiped or older store is raised. "+
			"Restore it from a backup; or, if %s is intact and the store this vendor ran on last, move the record aside (mv %s %s.bad) and start again: a new one is kept from then on",
			ErrCorrupt, path, err, storeDir, storeDir, path, path)
	}
	return c, nil
}
