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
}

func newContents(storeDir string) contents {
	return contents{Version: version, StoreDir: storeDir, Segments: map[string]int64{}}
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
	if c.Segments == nil {
		return contents{}, errors.New(`"segments" is missing`)
	}
	for tag, mark := range c.Segments {
		if err := segment.ValidateTag(tag); err != nil {
			return contents{}, err
		}
		if mark < 1 {
			return contents{}, fmt.Errorf("tag %q has mark %d, want a positive ID", tag, mark)
		}
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
