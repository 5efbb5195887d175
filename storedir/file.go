package storedir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
)

// version is the record's format.
const version = 1

// contents is the record as its file holds it.
type contents struct {
	Version int `json:"version"`
	// StoreDir is the store the record is of, for people reading it.
	StoreDir string `json:"store_dir"`
	// Segments is each tag's mark: no ID at or above it was handed out.
	Segments map[string]int64 `json:"segments"`
	// Workers is each worker ID's last timestamp (Unix ms): no ID was made
	// with it after that millisecond. Epoch is the snowflake epoch of the
	// vendor that recorded them (0: none yet).
	Workers map[int]int64 `json:"workers"`
	Epoch   int64         `json:"epoch"`
}

func newContents(storeDir string) contents {
	return contents{Version: version, StoreDir: storeDir, Segments: map[string]int64{}, Workers: map[int]int64{}}
}

func (c contents) encode() ([]byte, error) {
	b, err := json.MarshalIndent(c, "", "  ")
	return append(b, '\n'), err
}

// decode reads and checks a record: every field, and nothing else.
func decode(b []byte) (contents, error) {
	var c contents
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return contents{}, fmt.Errorf("it ends early, after %d bytes (%w)", len(b), err)
		}
		return contents{}, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return contents{}, errors.New("more follows the record")
	}
	if c.Version != version {
		return contents{}, fmt.Errorf("format version %d, this vendor reads %d", c.Version, version)
	}
	if c.Segments == nil || c.Workers == nil {
		return contents{}, errors.New(`"segments" or "workers" is missing`)
	}
	for tag, mark := range c.Segments {
		if err := segment.ValidateTag(tag); err != nil {
			return contents{}, err
		}
		if mark < 1 {
			return contents{}, fmt.Errorf("tag %q has mark %d, want a positive ID", tag, mark)
		}
	}
	for id, ms := range c.Workers {
		if id < 0 || id > snowflake.MaxWorkerID || ms < 1 {
			return contents{}, fmt.Errorf("worker ID %d has last timestamp %d, want a worker ID of 0 to %d and a positive Unix millisecond", id, ms, snowflake.MaxWorkerID)
		}
	}
	if c.Epoch < 0 {
		return contents{}, fmt.Errorf("epoch %d is negative", c.Epoch)
	}
	return c, nil
}

// tempPrefix starts the names of the files a write replaces the record
// with.
const tempPrefix = ".handed-out-"

// writeFile replaces path with b atomically and durably: b goes to a new
// file beside it, which is synced and renamed over path, and then the
// directory is synced, so that a crash at any point leaves path as it was
// or as b, and the rename survives a power cut.
func writeFile(path string, b []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a rename, of nothing
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir syncs a directory's entries; a file system that cannot sync a
// directory (EINVAL) has nothing to sync.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, syscall.EINVAL) {
		return nil
	}
	return err
}

// removeTemps removes what writes cut short by a crash left in dir.
func removeTemps(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
