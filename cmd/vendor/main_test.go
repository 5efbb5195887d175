package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/pgtest"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/vending"
	"github.com/leaf-nats/leaf/workerid"
)

// syncBuffer is a bytes.Buffer safe for the vendor's log writer and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHelpListsEveryVariable(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &out, &out); code != 0 {
		t.Fatalf("vendor -h exited %d", code)
	}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		name := "LEAF_" + f.Tag.Get("envconfig")
		if !strings.Contains(out.String(), name) {
			t.Errorf("vendor -h does not mention %s", name)
		}
		if d := f.Tag.Get("default"); d != "" && !strings.Contains(out.String(), d) {
			t.Errorf("vendor -h does not show %s's default %q", name, d)
		}
	}
}

func TestBadConfigurationIsRejected(t *testing.T) {
	for _, tc := range []struct{ env, val, want string }{
		{"LEAF_WORKER_ID", "1024", "LEAF_WORKER_ID"},
		{"LEAF_WORKER_ID", "x", "LEAF_WORKER_ID"},
		{"LEAF_MAX_BATCH", "0", "LEAF_MAX_BATCH"},
		{"LEAF_WORKER_LEASE_TTL", "10ms", "LEAF_WORKER_LEASE_TTL"},
		{"LEAF_WORKER_LEASE_TTL", "soon", "WORKER_LEASE_TTL"},
		{"LEAF_LOG_FORMAT", "xml", "LEAF_LOG_FORMAT"},
		{"LEAF_SUBJECT_PREFIX", "leaf.*", "LEAF_SUBJECT_PREFIX"},
		{"LEAF_EPOCH", "99999999999999", "LEAF_EPOCH"},
		{"LEAF_EPOCH", "0", "LEAF_EPOCH 0: want Unix milliseconds after 1970"},
		{"LEAF_WORKER_ID_RANGE", "5-2", `LEAF_WORKER_ID_RANGE "5-2": the first worker ID, 5, is above the last, 2`},
		{"LEAF_WORKER_ID_RANGE", "0-2000", "worker ID 2000 is above 1023"},
	} {
		t.Run(tc.env+"="+tc.val, func(t *testing.T) {
			t.Setenv(tc.env, tc.val)
			var out bytes.Buffer
			if code := run(context.Background(), nil, &out, &out); code != 2 {
				t.Fatalf("exit %d, want 2; output:\n%s", code, out.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Fatalf("message does not name %s:\n%s", tc.want, out.String())
			}
		})
	}
}

// authServer starts a server that demands a user and password.
func authServer(t *testing.T) *server.Server {
	t.Helper()
	return natstest.ServerWith(t, natsserver.Config{Configure: func(o *server.Options) {
		o.Username, o.Password = "leaf", "s3cret"
	}})
}

func TestRefusedCredentialsEndTheProcess(t *testing.T) {
	s := authServer(t)
	url := strings.Replace(s.ClientURL(), "nats://", "nats://leaf:wrong@", 1)
	t.Setenv("LEAF_NATS_URL", url)
	t.Setenv("LEAF_HTTP_ADDR", "")
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if code := run(ctx, nil, &out, &out); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if ctx.Err() != nil {
		t.Fatal("vendor hung on refused credentials")
	}
	msg := out.String()
	if !strings.Contains(msg, "refused the credentials") || strings.Contains(msg, "wrong") {
		t.Fatalf("message should explain and not print the password:\n%s", msg)
	}
}

// startVendor runs the vendor in-process against s until the test ends.
func startVendor(t *testing.T, env map[string]string) (stop func() int, logs *syncBuffer) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	t.Setenv("LEAF_HTTP_ADDR", "127.0.0.1:0")
	logs = &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- run(ctx, nil, logs, logs) }()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "vendor serving") {
		select {
		case c := <-code:
			t.Fatalf("vendor exited %d:\n%s", c, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("vendor did not start:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var once sync.Once
	var result int
	stop = func() int {
		once.Do(func() { cancel(); result = <-code })
		return result
	}
	t.Cleanup(func() { stop() })
	return stop, logs
}

func TestServeAndDrainReleasesLease(t *testing.T) {
	s := authServer(t)
	url := strings.Replace(s.ClientURL(), "nats://", "nats://leaf:s3cret@", 1)
	stop, logs := startVendor(t, map[string]string{"LEAF_NATS_URL": url})
	nc := natstest.Conn(t, s, nats.UserInfo("leaf", "s3cret"))

	msg, err := nc.Request("leaf.snowflake", []byte("3"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := vending.DecodeText(nil, msg.Data)
	if err != nil || len(ids) != 3 {
		t.Fatalf("reply %q: %v", msg.Data, err)
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, logs.String())
	}
	for _, want := range []string{"draining", "drained", "worker ID released"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, logs.String())
		}
	}
	js, _ := jetstream.New(nc)
	leases, err := js.KeyValue(context.Background(), kv.WorkersBucket)
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := leases.Keys(t.Context()); err == nil && len(keys) > 0 {
		t.Fatalf("leases left after a clean stop: %v", keys)
	}
}

func TestStaticWorkerID(t *testing.T) {
	s := natstest.Server(t)
	dir := t.TempDir()
	env := map[string]string{"LEAF_NATS_URL": s.ClientURL(), "LEAF_WORKER_ID": "42", "LEAF_NATS_STORE_DIR": dir}
	nc := natstest.Conn(t, s)
	var last int64
	for round := range 2 { // the second run starts after the first one's IDs
		stop, logs := startVendor(t, env)
		msg, err := nc.Request("leaf.snowflake", []byte("100"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := vending.DecodeText(nil, msg.Data)
		if err != nil {
			t.Fatalf("reply %q: %v", msg.Data, err)
		}
		if ids[0] <= last {
			t.Fatalf("run %d: first ID %d not after the previous run's last %d", round, ids[0], last)
		}
		if ids[0]>>12&1023 != 42 {
			t.Fatalf("ID %d is not from worker 42", ids[0])
		}
		last = ids[len(ids)-1]
		if code := stop(); code != 0 {
			t.Fatalf("exit %d:\n%s", code, logs.String())
		}
	}
}

// TestJSONLogsOneLinePerLifecycleEvent: every line is JSON, lifecycle events
// are logged, and a storm of bad requests adds no line per request.
func TestJSONLogsOneLinePerLifecycleEvent(t *testing.T) {
	s := natstest.Server(t)
	stop, logs := startVendor(t, map[string]string{"LEAF_NATS_URL": s.ClientURL(), "LEAF_LOG_FORMAT": "json"})
	nc := natstest.Conn(t, s)
	// Lines about the lease may come at any time on a loaded machine (a
	// late renewal); any other line the storm brings is one too many.
	linesBut := func(skip string) int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if l != "" && !strings.Contains(l, skip) {
				n++
			}
		}
		return n
	}
	before := linesBut("lease")
	for range 1000 {
		nc.Request("leaf.snowflake", []byte("-1"), 5*time.Second)
		nc.Request("leaf.segment.nosuch", nil, 5*time.Second)
	}
	if after := linesBut("lease"); after != before {
		t.Fatalf("2000 bad requests added %d log lines:\n%s", after-before, logs.String())
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Msg == "" || rec.Level == "" {
			t.Fatalf("log line is not JSON with level and msg: %q", line)
		}
		msgs = append(msgs, rec.Msg)
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"worker ID claimed", "vendor serving", "signal received: draining", "worker ID released", "vendor stopped"} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q line in:\n%s", want, all)
		}
	}
}

// A static worker ID is leased in KV too: no leased worker and no second
// static vendor can take it while it runs. Worker ID 0 is an ID like any
// other, not "any ID".
func TestStaticWorkerIDIsLeasedInKV(t *testing.T) {
	for _, id := range []int{42, 0} {
		t.Run(strconv.Itoa(id), func(t *testing.T) {
			s := natstest.Server(t)
			env := map[string]string{"LEAF_NATS_URL": s.ClientURL(), "LEAF_WORKER_ID": strconv.Itoa(id), "LEAF_NATS_STORE_DIR": t.TempDir()}
			startVendor(t, env)
			js, err := jetstream.New(natstest.Conn(t, s))
			if err != nil {
				t.Fatal(err)
			}
			leases := workerLeases(t, js)
			if len(leases) != 1 || leases[0] != id {
				t.Fatalf("leases held: %v, want only worker ID %d", leases, id)
			}
			if got := decodeWorker(t, s); got != id {
				t.Fatalf("the vendor pinned to %d makes IDs of worker %d", id, got)
			}
			if _, err := kv.Claim(context.Background(), kv.Plain(js), kv.LeaseConfig{TTL: 30 * time.Second, IDs: &workerid.Range{First: id, Last: id}}); !errors.Is(err, kv.ErrNoFreeWorkerID) {
				t.Fatalf("a leased claim of the static ID: %v, want ErrNoFreeWorkerID", err)
			}
			t.Setenv("LEAF_NATS_STORE_DIR", t.TempDir())
			var out syncBuffer
			if code := run(context.Background(), nil, &out, &out); code != 1 || !strings.Contains(out.String(), fmt.Sprintf("LEAF_WORKER_ID %d is held by another live worker", id)) {
				t.Fatalf("a second vendor pinned to %d: exit %d:\n%s", id, code, out.String())
			}
		})
	}
}

// LEAF_WORKER_ID_RANGE=0-0 is worker ID 0 alone.
func TestWorkerIDRangeOfOne(t *testing.T) {
	s := natstest.Server(t)
	startVendor(t, map[string]string{"LEAF_NATS_URL": s.ClientURL(), "LEAF_WORKER_ID_RANGE": "0-0", "LEAF_NATS_STORE_DIR": t.TempDir()})
	js, err := jetstream.New(natstest.Conn(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if leases := workerLeases(t, js); len(leases) != 1 || leases[0] != 0 {
		t.Fatalf("leases held: %v, want only worker ID 0", leases)
	}
	if got := decodeWorker(t, s); got != 0 {
		t.Fatalf("IDs of worker %d, want 0", got)
	}
}

// workerLeases returns the worker IDs leased in bucket leaf_workers.
func workerLeases(t *testing.T, js jetstream.JetStream) []int {
	t.Helper()
	b, err := js.KeyValue(context.Background(), kv.WorkersBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := b.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for k := range keys.Keys() {
		id, err := strconv.Atoi(strings.TrimPrefix(k, "worker."))
		if err != nil {
			t.Fatalf("key %q in %s", k, kv.WorkersBucket)
		}
		ids = append(ids, id)
	}
	return ids
}

// decodeWorker takes a snowflake ID from the vendor and returns its worker
// ID, as the vendor's decode endpoint reads it.
func decodeWorker(t *testing.T, s *server.Server) int {
	t.Helper()
	nc := natstest.Conn(t, s)
	msg, err := nc.Request("leaf.snowflake", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	msg, err = nc.Request("leaf.snowflake.decode", msg.Data, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var d vending.Decoded
	if err := json.Unmarshal(msg.Data, &d); err != nil {
		t.Fatalf("decode reply %q: %v", msg.Data, err)
	}
	return d.WorkerID
}

// The tag commands against the embedded store of a stopped vendor, as a
// user runs them: add, duplicate, list, set-step, delete, add again.
func TestTagsCommands(t *testing.T) {
	t.Setenv("LEAF_NATS_STORE_DIR", t.TempDir())
	tags := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := run(context.Background(), append([]string{"tags"}, args...), &out, &out)
		return code, out.String()
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"add", "order", "-step", "1000", "-description", "orders"}, 0, `added normal tag "order" (step 1000, first ID 1)`},
		{[]string{"add", "ledger", "-strict"}, 0, `added strict tag "ledger"`},
		{[]string{"set-mode", "ledger", "sometimes"}, 2, `mode "sometimes": want strict or normal`},
		{[]string{"set-mode", "nope", "strict"}, 1, `tag "nope" not found`},
		{[]string{"list"}, 0, "ledger  strict"},
		{[]string{"set-mode", "ledger", "normal"}, 0, `tag "ledger": normal`},
		{[]string{"list"}, 0, "ledger  normal"},
		{[]string{"add", "order"}, 1, `tag "order" already exists`},
		{[]string{"add", "bad*tag"}, 2, "contains '*'"},
		{[]string{"add", "x", "-step", "0"}, 2, "step 0 is out of range"},
		{[]string{"add"}, 2, "usage: vendor tags add <tag>"},
		{[]string{"set-step", "order", "-5"}, 2, "step -5 is out of range"},
		{[]string{"list"}, 0, "order   normal  1       1000  "},
		{[]string{"set-step", "order", "5000"}, 0, "step 5000"},
		{[]string{"set-step", "nope", "5"}, 1, `tag "nope" not found`},
		{[]string{"delete", "order"}, 0, `deleted tag "order"`},
		{[]string{"delete", "order"}, 1, `tag "order" not found`},
		{[]string{"delete", "ledger"}, 0, `deleted tag "ledger"`},
		{[]string{"list"}, 0, "no tags"},
		{[]string{"add", "reborn", "-start", "500"}, 0, "first ID 500"},
		{[]string{"delete", "reborn"}, 0, `deleted tag "reborn"`},
		{[]string{"add", "reborn"}, 0, "the tag was deleted before: it continues from 500, above every ID it had"},
		{[]string{"frobnicate"}, 2, "unknown subcommand"},
		{nil, 2, "which subcommand? add, list, set-step, set-mode, raise, delete or import"},
		{[]string{"add", "-h"}, 0, "IDs per segment (the smallest step the dynamic step may use) (default 1000)"},
	} {
		code, out := tags(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Fatalf("vendor tags %v: exit %d, output:\n%s\nwant exit %d and %q", tc.args, code, out, tc.code, tc.want)
		}
	}
}

// tags goes through the vendor that holds the store directory, so the
// vendor serves what it adds; from another directory, through the vendor at
// LEAF_NATS_LISTEN; with neither it says so instead of making an empty
// store.
func TestTagsThroughTheRunningVendor(t *testing.T) {
	dir := t.TempDir()
	listen := "127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	t.Setenv("LEAF_NATS_URL", "")
	t.Setenv("LEAF_NATS_LISTEN", listen)
	startVendor(t, map[string]string{"LEAF_NATS_STORE_DIR": dir})
	var out bytes.Buffer
	if code := run(context.Background(), []string{"tags", "add", "order"}, &out, &out); code != 0 || !strings.Contains(out.String(), "of the vendor at nats://") {
		t.Fatalf("tags add next to a running vendor: exit %d:\n%s", code, out.String())
	}
	url, err := natsserver.StoreURL(dir)
	if err != nil || url == "" {
		t.Fatalf("store URL %q, %v", url, err)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msg, err := nc.Request("leaf.segment.order", nil, 5*time.Second)
	if err != nil || string(msg.Data) != "1" {
		t.Fatalf("the vendor does not serve the tag added through it: %v %q %v", msg.Header, msg.Data, err)
	}
	// A second vendor on the same store directory is refused.
	var second syncBuffer
	if code := run(context.Background(), nil, &second, &second); code != 1 || !strings.Contains(second.String(), "in use by another process") {
		t.Fatalf("second vendor on one store: exit %d:\n%s", code, second.String())
	}

	t.Setenv("LEAF_NATS_STORE_DIR", filepath.Join(t.TempDir(), "nothing-here"))
	out.Reset()
	if code := run(context.Background(), []string{"tags", "list"}, &out, &out); code != 0 || !strings.Contains(out.String(), "order") {
		t.Fatalf("tags list from another directory, with the vendor at LEAF_NATS_LISTEN: exit %d:\n%s", code, out.String())
	}
	t.Setenv("LEAF_NATS_LISTEN", "127.0.0.1:"+strconv.Itoa(natstest.FreePort(t)))
	out.Reset()
	if code := run(context.Background(), []string{"tags", "list"}, &out, &out); code != 1 || !strings.Contains(out.String(), "no store at") {
		t.Fatalf("tags list without a store: exit %d:\n%s", code, out.String())
	}
}

func TestPortInUseFailsAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("LEAF_NATS_URL", "")
	t.Setenv("LEAF_NATS_LISTEN", ln.Addr().String())
	t.Setenv("LEAF_NATS_STORE_DIR", t.TempDir())
	t.Setenv("LEAF_HTTP_ADDR", "")
	var out syncBuffer
	start := time.Now()
	if code := run(context.Background(), nil, &out, &out); code != 1 || !strings.Contains(out.String(), "set LEAF_NATS_LISTEN to a free address") {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("took %v to report a taken port", time.Since(start))
	}
}

// configVars returns the LEAF_* variables Config reads, from its envconfig
// tags.
func configVars() map[string]bool {
	vars := map[string]bool{}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		if name := typ.Field(i).Tag.Get("envconfig"); name != "" {
			vars[envPrefix+"_"+name] = true
		}
	}
	return vars
}

// TestComposeSetsOnlyVariablesTheVendorReads: a misspelt variable in
// compose.yaml would be ignored without a word.
func TestComposeSetsOnlyVariablesTheVendorReads(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Environment yaml.Node `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	known, seen := configVars(), 0
	for name, s := range c.Services {
		var keys []string
		switch n := s.Environment; n.Kind {
		case yaml.MappingNode:
			for i := 0; i < len(n.Content); i += 2 {
				keys = append(keys, n.Content[i].Value)
			}
		case yaml.SequenceNode:
			for _, item := range n.Content {
				k, _, _ := strings.Cut(item.Value, "=")
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, envPrefix+"_") {
				continue
			}
			seen++
			if !known[k] {
				t.Errorf("compose.yaml: service %s sets %s, which the vendor does not read", name, k)
			}
		}
	}
	if seen == 0 {
		t.Fatal("compose.yaml sets no LEAF_ variable: the test read nothing")
	}
}

// A first start on a new embedded store that fails after its buckets were
// made leaves nothing that makes the next start wait: the store was seeded
// with a bound on every worker ID's last timestamp, so the claim takes one
// at once instead of holding it back a lease TTL, as a young bucket
// otherwise would.
func TestFailedFirstStartLeavesNoWait(t *testing.T) {
	t.Setenv("LEAF_NATS_STORE_DIR", t.TempDir())
	t.Setenv("LEAF_NATS_LISTEN", "127.0.0.1:"+strconv.Itoa(natstest.FreePort(t)))
	// A first start that fails after it made its buckets: Postgres
	// refuses its user.
	dsn, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	dsn.User = url.UserPassword("nobody", "wrong")
	t.Setenv("LEAF_POSTGRES_URL", dsn.String())
	t.Setenv("LEAF_HTTP_ADDR", "")
	var out syncBuffer
	if code := run(context.Background(), nil, &out, &out); code != 1 || !strings.Contains(out.String(), "nobody") {
		t.Fatalf("first start with a user Postgres refuses: exit %d\n%s", code, out.String())
	}
	t.Setenv("LEAF_POSTGRES_URL", "")
	stop, logs := startVendor(t, nil)
	if code := stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, logs.String())
	}
	if strings.Contains(logs.String(), "waiting") {
		t.Fatalf("the start after a failed first start waited:\n%s", logs.String())
	}
}

// A vendor stopped by a signal while its claim waits (a new cluster on an
// external server holds worker IDs back a lease TTL) stops cleanly, and its
// readiness said meanwhile how long was left.
func TestSignalWhileWaitingToClaim(t *testing.T) {
	s := natstest.Server(t)
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	t.Setenv("LEAF_HTTP_ADDR", "127.0.0.1:0")
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() { code <- run(ctx, nil, logs, logs) }()
	eventually(t, 20*time.Second, "the claim to wait", func() bool { return strings.Contains(logs.String(), "claiming a worker ID: ") })
	_, body := get(t, httpURL(t, logs)+"readyz")
	if !strings.Contains(body, "passes by itself") || !strings.Contains(body, "s left)") {
		t.Fatalf("/readyz while the claim waits: %s", body)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d after a signal while waiting:\n%s", c, logs.String())
	}
	if out := logs.String(); !strings.Contains(out, "vendor stopped before it served") || strings.Contains(out, "level=ERROR") {
		t.Fatalf("logs:\n%s", out)
	}
}

// The configuration table (docs/configuration.md) lists every variable the
// vendor reads, with the default it has; and no document or deployment
// file names a LEAF_ variable the vendor does not read (a renamed one would
// be set in vain).
func TestDocsAgreeWithTheConfiguration(t *testing.T) {
	root := filepath.Join("..", "..")
	const tableFile = "docs/configuration.md"
	table, err := os.ReadFile(filepath.Join(root, tableFile))
	if err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := f.Tag.Get("envconfig")
		if name == "" {
			continue
		}
		name = envPrefix + "_" + name
		row := regexp.MustCompile("(?m)^\\| [^|]*`" + name + "`[^|]*\\| ([^|]*) \\|").FindSubmatch(table)
		if row == nil {
			t.Errorf("%s's configuration table lacks %s", tableFile, name)
			continue
		}
		if def := f.Tag.Get("default"); def != "" && string(row[1]) != "`"+def+"`" {
			t.Errorf("%s gives %s the default %s, the vendor %q", tableFile, name, row[1], def)
		}
	}
	known := configVars()
	// Not the vendor's: the tests', the benchmarks', the image build's, the
	// NATS configuration's, the import plan's column.
	others := regexp.MustCompile(`^LEAF_(TEST|E2E|SIM|BENCH|REVISION|VENDOR_PASSWORD|CLIENT_PASSWORD|ADMIN_PASSWORD|TAG$|CLIENTS$|MAX_ID$)`)
	var files []string
	for _, glob := range []string{"*.md", "docs/*.md", "docs/*.conf", "compose.yaml", "Dockerfile", "deploy/*/*"} {
		m, _ := filepath.Glob(filepath.Join(root, glob))
		files = append(files, m...)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range regexp.MustCompile(`\bLEAF_[A-Z0-9_]*[A-Z0-9]`).FindAll(data, -1) {
			if name := string(v); !known[name] && !others.MatchString(name) {
				t.Errorf("%s names %s, which the vendor does not read", filepath.Base(file), name)
			}
		}
	}
}
