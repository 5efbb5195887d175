package natsserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// lockName is the file in a store directory that its user holds locked and
// in which it writes the embedded server's client URL.
const lockName = "leaf-vendor.lock"

// ErrStoreInUse is returned by LockStore when another process holds the
// store directory.
var ErrStoreInUse = errors.New("store directory in use by another process")

// StoreLock is an exclusive hold on a store directory: two JetStream servers
// on one directory would corrupt it, and a tool must not write behind a
// running vendor's back.
type StoreLock struct {
	f *os.File
}

// LockStore creates dir if needed and locks it. When another process holds
// it, the error wraps ErrStoreInUse and names the URL that process wrote.
func LockStore(dir string) (*StoreLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(f.Name())
		f.Close()
		if url := strings.TrimSpace(string(b)); url != "" {
			return nil, fmt.Errorf("%w: %s is the store of the vendor serving NATS at %s", ErrStoreInUse, dir, url)
		}
		return nil, fmt.Errorf("%w: %s", ErrStoreInUse, dir)
	}
	return &StoreLock{f: f}, nil
}

// SetURL records the client URL of the server using the directory.
func (l *StoreLock) SetURL(url string) error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt([]byte(url+"\n"), 0)
	return err
}

// Path returns the lock file: a vendor checks that it is still there
// (storedir.Watch), since a store directory deleted under it takes it along.
func (l *StoreLock) Path() string { return l.f.Name() }

// Close releases the lock.
func (l *StoreLock) Close() error {
	l.f.Truncate(0)
	return l.f.Close()
}

// StoreURL returns the client URL written by the process holding dir, or ""
// when no process holds it.
func StoreURL(dir string) (string, error) {
	l, err := LockStore(dir)
	if err == nil {
		return "", l.Close()
	}
	if !errors.Is(err, ErrStoreInUse) {
		return "", err
	}
	b, rerr := os.ReadFile(filepath.Join(dir, lockName))
	if rerr != nil {
		return "", rerr
	}
	if url := strings.TrimSpace(string(b)); url != "" {
		return url, nil
	}
	return "", err
}
