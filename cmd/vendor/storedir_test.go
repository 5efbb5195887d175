package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/vending"
)

// The embedded store put back from an older copy between two runs (its
// row of the tag below IDs handed out since): the record kept beside the
// store directory raises the tag above them, and the vendor says so; tags
// add on a store deleted since starts the tag above them too.
func TestEmbeddedStoreBackOlder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "leaf-data")
	listen := "127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	t.Setenv("LEAF_NATS_URL", "")
	t.Setenv("LEAF_NATS_LISTEN", listen)
	t.Setenv("LEAF_NATS_STORE_DIR", dir)
	t.Setenv("LEAF_WORKER_LEASE_TTL", "3s")
	tags := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if code := run(context.Background(), append([]string{"tags"}, args...), &out, &out); code != 0 {
			t.Fatalf("vendor tags %v: exit %d\n%s", args, code, out.String())
		}
		return out.String()
	}
	tags("add", "order", "-step", "10")
	older := filepath.Join(t.TempDir(), "older")
	if err := os.CopyFS(older, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}

	stop, logs := startVendor(t, nil)
	handed := orderIDs(t, listen, 3, 25)
	if code := stop(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, logs.String())
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(older, dir); err != nil {
		t.Fatal(err)
	}
	stop, logs = startVendor(t, nil)
	if got := orderIDs(t, listen, 1, 1); got[0] <= slices.Max(handed) {
		t.Fatalf("first ID from the older store: %d, want above %d, handed out before\n%s", got[0], slices.Max(handed), logs.String())
	}
	if !strings.Contains(logs.String(), "the segment store went back") {
		t.Fatalf("the vendor does not say the store went back:\n%s", logs.String())
	}
	stop()

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if out := tags("add", "order", "-step", "10"); !strings.Contains(out, "handed out from an earlier store") || strings.Contains(out, "first ID 1)") {
		t.Fatalf("tags add on a store deleted since:\n%s", out)
	}
}

// orderIDs asks the vendor at listen for n IDs of tag order, reqs times,
// and returns them all; a 503 (the marks not yet trusted) is asked again.
func orderIDs(t *testing.T, listen string, reqs, n int) []int64 {
	t.Helper()
	nc, err := nats.Connect("nats://" + listen)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var out []int64
	testtool.Eventually(t, 30*time.Second, fmt.Sprintf("%d IDs of tag order", reqs*n), func() bool {
		msg, err := nc.Request("leaf.segment.order", []byte(strconv.Itoa(n)), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
			if code != "503" {
				t.Fatalf("%s %s", code, msg.Data)
			}
			return false
		}
		ids, err := vending.DecodeText(nil, msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ids...)
		return len(out) >= reqs*n
	})
	return out
}
