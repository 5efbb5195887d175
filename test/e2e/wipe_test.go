package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/internal/natstest"
)

// TestWipedEmbeddedStore is issue 30's second gap: in dev mode (embedded
// NATS, segments in its KV store) the store directory is deleted while the
// vendor serves a segment load, and the vendor is restarted on the new
// empty store, where the tag is added again. The vendor must say that its
// store is gone (a log line, /readyz 503 naming it), answer 503 instead of
// vending, and after the restart hand out no ID it handed out before: the
// record kept beside the directory raises the tag above them.
func TestWipedEmbeddedStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "leaf-data")
	natsURL := "nats://127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	env := map[string]string{"LEAF_NATS_STORE_DIR": dir, "LEAF_NATS_LISTEN": strings.TrimPrefix(natsURL, "nats://")}
	v := startVendor(t, "w", env)
	vendorCommand(t, env, "tags", "add", "order", "-step", "100")
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tl := newTally("wiped store: leaf.segment.order")
	spec := loadSpec{subject: "leaf.segment.order", batch: 10, clients: 2, timeout: time.Second, pace: 20 * time.Millisecond}
	load := startLoad(t, nc, tl, spec)
	tl.waitIDs(t, 2000, 60*time.Second)

	atWipe, _ := tl.counts()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	wiped := time.Now()
	if _, err := v.awaitLog(regexp.MustCompile(`embedded NATS store gone: not vending`), 15*time.Second); err != nil {
		t.Errorf("vendor %s: %v", v.name, err)
	}
	var code int
	var body string
	notReady := within(15*time.Second, func() bool {
		code, body, _ = fetch("http://"+v.httpAddr()+"/readyz", 5*time.Second)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "embedded NATS store gone")
	})
	if !notReady {
		t.Errorf("/readyz %d %q after the store was deleted, want a 503 naming it", code, body)
	}
	took := time.Since(wiped)
	probe := newTally("after the wipe")
	if _, got := probe.request(nc, spec.subject, 1, 2*time.Second); got != "503" {
		t.Errorf("a segment request after the store went: %q (%s), want a 503", got, probe.sample(got))
	}
	handed, _ := tl.counts()
	load.stop()
	v.signal(syscall.SIGTERM)
	if !within(30*time.Second, func() bool { return !v.running() }) {
		t.Errorf("vendor %s did not stop within 30s of SIGTERM after the wipe", v.name)
		v.kill()
	}

	v.start()
	v.waitServing()
	out := vendorCommand(t, env, "tags", "add", "order", "-step", "100")
	if !strings.Contains(out, "continues above them") {
		t.Errorf("tags add on the new store does not say the tag continues above the IDs handed out:\n%s", out)
	}
	load = startLoad(t, nc, tl, spec)
	tl.waitIDs(t, handed+2000, 60*time.Second)
	load.stop()
	total, dups := repeats(tl)
	first, _, _ := strings.Cut(out, "\n")
	report(t, "wiped embedded store: /readyz %d after %v (%.100q); %d IDs handed out after the rm -rf; %d IDs, %d repeats across the wipe and restart; tags add: %s",
		code, took.Round(100*time.Millisecond), body, handed-atWipe, total, dups, first)
	if dups != 0 {
		t.Errorf("%d of %d IDs repeated across the wipe", dups, total)
	}
}
