package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/status"
	"github.com/leaf-nats/leaf/vending"
)

// The attacks of issue 19 ("No one in"), each run against real vendor
// processes as docs/security.md promises: under the shipped
// least-privilege configuration (docs/nats-server-single.conf and
// docs/nats-accounts.conf, run in this process with their passwords in the
// environment), but for the HTTP attack, which the issue saw with the
// embedded server:
//
//   - TestAttackReplySubjects: reply subjects that name the vendors' KV
//     keys, JetStream API requests and the vendors' own subjects and
//     inboxes, from leaf-client and from a user inside account LEAF.
//   - TestAttackVendorSubjects: the vendors-only subjects, counts above
//     LEAF_MAX_RANGE_BATCH, and range requests beyond
//     LEAF_SEGMENT_RATE_LIMIT.
//   - TestAttackIdleHTTPConnections: 20,000 idle HTTP connections, held by
//     copies of this binary (TestAttackHTTPConnHolder).
//   - TestAttackManyTags: 3,000 tags against micro stats, the cluster table
//     and the vendors' safety exchange.
//
// Each counts the IDs its clients were given and the repeats among them,
// and the vendors that stopped: both must be zero. Each reports its counts
// before it checks them, so that an older vendor build
// (LEAF_E2E_VENDOR_BIN) yields the figures of what it does wrong.

// docsPassword is the password of a user of the test's copy of
// docs/nats-accounts.conf.
func docsPassword(user string) string {
	switch user {
	case "leaf-vendor":
		return "vendor-pw"
	case "leaf-client":
		return "client-pw"
	case "leaf-admin":
		return "admin-pw"
	case "sys":
		return "sys-pw"
	case "leaf-app2":
		return "app2-pw"
	}
	return "inside-pw" // leaf-inside, leaf-inside-strict
}

// adminLine is the line of docs/nats-accounts.conf after which the test's
// copy adds insideUsers.
const adminLine = "{ user: leaf-admin, password: $LEAF_ADMIN_PASSWORD }"

// insideUsers join account LEAF in the test's copy of the accounts file:
// users an operator might put beside the vendors (a tool, an application
// given a LEAF user by mistake). leaf-inside may publish the three client
// subjects only, leaf-inside-strict the vendors' strict subjects only; both
// read their inboxes. Inside LEAF no service import gives their requests a
// reply subject of the server's: what stops a reply subject they choose
// from becoming a write is the vendors' own guard (LEAF_REPLY_PREFIXES).
const insideUsers = `
      { user: leaf-inside, password: inside-pw, permissions: {
          publish: { allow: ["leaf.snowflake", "leaf.snowflake.decode", "leaf.segment.>"] }
          subscribe: { allow: ["_INBOX.>"] } } }
      { user: leaf-inside-strict, password: inside-pw, permissions: {
          publish: { allow: ["leaf.strict.>"] }
          subscribe: { allow: ["_INBOX.>"] } } }`

// docsNATS is a nats-server run from the shipped single-server
// configuration (ports and store aside), with insideUsers added.
type docsNATS struct {
	url string
}

// confEdit changes the test's copy of the shipped configuration: the
// first anchor (in nats-server-single.conf, else in nats-accounts.conf)
// becomes with, which keeps the anchor when it adds to it.
type confEdit struct{ anchor, with string }

// docsPasswordVars are the environment variables the shipped
// configuration reads its passwords from, and the users they are of.
// runTests sets them once for the whole run (t.Setenv would keep the tests
// that start docsNATS from running in parallel). The vendors read none of
// them (vendorEnv drops every LEAF_ variable; NATS_SYS_PASSWORD is the
// server's).
var docsPasswordVars = map[string]string{"LEAF_VENDOR_PASSWORD": "leaf-vendor", "LEAF_CLIENT_PASSWORD": "leaf-client",
	"LEAF_ADMIN_PASSWORD": "leaf-admin", "NATS_SYS_PASSWORD": "sys"}

// writeDocsConf writes the test's copy of the shipped configuration to
// dir, with insideUsers added and then edits made, and returns its
// nats-server-single.conf, which reads the passwords from the environment
// (docsPasswordVars).
func writeDocsConf(t *testing.T, dir string, edits ...confEdit) string {
	t.Helper()
	names := []string{"nats-server-single.conf", "nats-accounts.conf"}
	confs := make([][]byte, len(names))
	for i, name := range names {
		conf, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		confs[i] = conf
	}
	for _, e := range append([]confEdit{{adminLine, adminLine + insideUsers}}, edits...) {
		i := slices.IndexFunc(confs, func(c []byte) bool { return bytes.Contains(c, []byte(e.anchor)) })
		if i < 0 {
			t.Fatalf("docs/%s has no line %q to change", strings.Join(names, " nor docs/"), e.anchor)
		}
		confs[i] = bytes.Replace(confs[i], []byte(e.anchor), []byte(e.with), 1)
	}
	for i, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), confs[i], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, names[0])
}

// startDocsNATS starts the shipped configuration, changed by edits, on a
// free port until the test ends.
func startDocsNATS(t *testing.T, edits ...confEdit) *docsNATS {
	t.Helper()
	o, err := server.ProcessConfigFile(writeDocsConf(t, t.TempDir(), edits...))
	if err != nil {
		t.Fatalf("docs/nats-server-single.conf: %v", err)
	}
	o.Host, o.Port = "127.0.0.1", server.RANDOM_PORT
	o.HTTPHost, o.HTTPPort = "", 0
	o.Cluster, o.Routes = server.ClusterOpts{}, nil
	o.StoreDir = t.TempDir()
	o.NoSigs, o.NoLog, o.DisableJetStreamBanner = true, true, true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("docs/nats-server-single.conf: %v", err)
	}
	go s.Start() // as internal/natsserver starts its servers
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("the server of docs/nats-server-single.conf did not start")
	}
	return &docsNATS{url: s.ClientURL()}
}

// env is a vendor's environment (or a vendor command's) as user.
func (d *docsNATS) env(user string, kvs ...string) map[string]string {
	return with(map[string]string{"LEAF_NATS_URL": d.url, "LEAF_NATS_USER": user, "LEAF_NATS_PASSWORD": docsPassword(user)}, kvs...)
}

// connect connects as user until the test ends; the server's asynchronous
// errors (permission violations) arrive on the channel.
func (d *docsNATS) connect(t testing.TB, user string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 256)
	nc, err := nats.Connect(d.url, nats.UserInfo(user, docsPassword(user)), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// js is a JetStream context of leaf-admin, who may read every bucket.
func (d *docsNATS) js(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, _ := d.connect(t, "leaf-admin")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// stateBuckets are the six buckets the vendors' uniqueness rests on.
var stateBuckets = []string{kv.ClusterBucket, kv.WorkersBucket, kv.ClocksBucket, kv.SegmentBucket, kv.MarksBucket, kv.LeadersBucket}

// bucketState is what an attack must leave as it was in the six buckets:
// each bucket's stream (when it was made), its keys and their values. What
// vendors advance as they vend is set apart, and may only grow: a row's
// max_id (its update_time is left out), a worker ID's last timestamp.
type bucketState struct {
	fixed map[string]string // "bucket" or "bucket/key" -> what must not change
	grows map[string]int64  // "bucket/key" -> what may only grow
}

// readBuckets reads every key of the six buckets as leaf-admin. A bucket
// that cannot be read is recorded as such, not fatal: an old vendor under
// attack may have lost one.
func readBuckets(t testing.TB, js jetstream.JetStream) bucketState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := bucketState{fixed: map[string]string{}, grows: map[string]int64{}}
	for _, b := range stateBuckets {
		s, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			st.fixed[b] = "no stream: " + err.Error()
			continue
		}
		st.fixed[b] = "made " + s.CachedInfo().Created.Format(time.RFC3339Nano)
		bucket, err := js.KeyValue(ctx, b)
		if err != nil {
			st.fixed[b] += ", unreadable: " + err.Error()
			continue
		}
		keys, err := bucket.ListKeys(ctx)
		if err != nil {
			st.fixed[b] += ", keys unreadable: " + err.Error()
			continue
		}
		for k := range keys.Keys() {
			e, err := bucket.Get(ctx, k)
			if err != nil {
				st.fixed[b+"/"+k] = "unreadable: " + err.Error()
				continue
			}
			st.add(b, k, e.Value())
		}
	}
	return st
}

// add records one key's value, setting apart what may grow.
func (st bucketState) add(bucket, key string, v []byte) {
	id := bucket + "/" + key
	switch bucket {
	case kv.ClocksBucket:
		if ms, epoch, err := kv.ParseClock(v); err == nil {
			st.fixed[id], st.grows[id] = "epoch "+strconv.FormatInt(epoch, 10), ms
			return
		}
	case kv.SegmentBucket:
		var row map[string]any
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		if dec.Decode(&row) == nil && row["max_id"] != nil {
			maxID, _ := row["max_id"].(json.Number).Int64()
			delete(row, "max_id")
			delete(row, "update_time")
			rest, _ := json.Marshal(row) // sorted keys
			st.fixed[id], st.grows[id] = string(rest), maxID
			return
		}
	}
	st.fixed[id] = string(v)
}

// changes lists what differs from st in after: keys gone, new or changed,
// and values that went back.
func (st bucketState) changes(after bucketState) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(st.fixed)) {
		if a, ok := after.fixed[k]; !ok {
			out = append(out, fmt.Sprintf("%s: gone (was %.120s)", k, st.fixed[k]))
		} else if a != st.fixed[k] {
			out = append(out, fmt.Sprintf("%s: %.120s -> %.120s", k, st.fixed[k], a))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(after.fixed)) {
		if _, ok := st.fixed[k]; !ok {
			out = append(out, fmt.Sprintf("%s: new, %.120s", k, after.fixed[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(st.grows)) {
		if a, ok := after.grows[k]; ok && a < st.grows[k] {
			out = append(out, fmt.Sprintf("%s: went back from %d to %d", k, st.grows[k], a))
		}
	}
	return out
}

// grew lists the values of st that after holds larger: what vendors
// advance as they vend, which nothing may advance while no one vends.
func (st bucketState) grew(after bucketState, bucket string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(st.grows)) {
		if a := after.grows[k]; strings.HasPrefix(k, bucket+"/") && a > st.grows[k] {
			out = append(out, fmt.Sprintf("%s: grew by %d, from %d to %d", k, a-st.grows[k], st.grows[k], a))
		}
	}
	return out
}

// bucketWatch sees every write to the six buckets while it runs, and
// counts those no vendor makes: a put of a value that is not the record
// its bucket holds (a vendor's reply: IDs, a decoded ID, an error), a
// delete or a purge.
type bucketWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	writes   int
	forged   int
	examples []string
}

// watchBuckets watches every bucket that exists, until stop or the test's
// end.
func watchBuckets(t testing.TB, js jetstream.JetStream) *bucketWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &bucketWatch{cancel: cancel}
	t.Cleanup(w.stop)
	for _, b := range stateBuckets {
		bucket, err := js.KeyValue(ctx, b)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			continue // readBuckets records it absent, before and after
		}
		if err != nil {
			t.Fatalf("open %s: %v", b, err)
		}
		watcher, err := bucket.WatchAll(ctx, jetstream.UpdatesOnly())
		if err != nil {
			t.Fatalf("watch %s: %v", b, err)
		}
		w.wg.Go(func() {
			defer watcher.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case e, ok := <-watcher.Updates():
					if !ok {
						return
					}
					if e != nil {
						w.note(b, e)
					}
				}
			}
		})
	}
	return w
}

func (w *bucketWatch) note(bucket string, e jetstream.KeyValueEntry) {
	why := forgery(bucket, e.Key(), e.Operation(), e.Value())
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	if why != "" {
		w.forged++
		if len(w.examples) < 5 {
			w.examples = append(w.examples, fmt.Sprintf("%s/%s rev %d: %s: %.80q", bucket, e.Key(), e.Revision(), why, e.Value()))
		}
	}
}

// counts returns the writes seen, those no vendor makes, and examples.
func (w *bucketWatch) counts() (writes, forged int, examples []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes, w.forged, slices.Clone(w.examples)
}

func (w *bucketWatch) stop() {
	w.cancel()
	w.wg.Wait()
}

// recordField is a field every record a vendor writes to a bucket has
// (kv's leaseValue, leadValue, Contract, segmentRow, storeRecord); a
// vendor's reply to a request has none of them.
var recordField = map[string]string{
	kv.WorkersBucket: "holder", kv.LeadersBucket: "holder", kv.ClusterBucket: "layout", kv.SegmentBucket: "max_id",
}

// forgery says why a write to bucket is none a vendor makes, "" when it
// is one.
func forgery(bucket, key string, op jetstream.KeyValueOp, v []byte) string {
	if op != jetstream.KeyValuePut {
		return "a " + op.String()
	}
	switch bucket {
	case kv.ClocksBucket:
		if _, epoch, err := kv.ParseClock(v); err != nil || epoch != snowflake.DefaultEpoch {
			return "not a last timestamp with its epoch"
		}
		return ""
	case kv.MarksBucket:
		if n, err := strconv.ParseInt(string(v), 10, 64); err != nil || n < 1 {
			return "not a mark"
		}
		return ""
	}
	field := recordField[bucket]
	if bucket == kv.SegmentBucket && strings.HasPrefix(key, "=") {
		field = "created" // the store's identity
	}
	var rec map[string]json.RawMessage
	if err := json.Unmarshal(v, &rec); err != nil {
		return "not a JSON record"
	}
	if _, ok := rec[field]; field != "" && !ok {
		return "a JSON object without " + field
	}
	return ""
}

// askAll publishes a request on nc and returns every reply that arrives
// within wait: each vendor answers a plain subscription.
func askAll(t testing.TB, nc *nats.Conn, subject string, wait time.Duration) []*nats.Msg {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	var out []*nats.Msg
	deadline := time.Now().Add(wait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return out
		}
		out = append(out, m)
	}
}

// fetch GETs url on a connection of its own, within timeout.
func fetch(url string, timeout time.Duration) (code int, body string, err error) {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metric adds up the samples of /metrics text named name whose labels
// contain every one of labels (such as `reason="..."`).
func metric(text, name string, labels ...string) float64 {
	sum := 0.0
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		cut := strings.LastIndexByte(rest, ' ') // label values hold spaces
		if cut < 0 {
			continue
		}
		series, value := rest[:cut], rest[cut+1:]
		keep := true
		for _, l := range labels {
			keep = keep && strings.Contains(series, l)
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(value), 64); keep && err == nil {
			sum += f
		}
	}
	return sum
}

// vendorMetric adds up metric name (with labels) across vendors; a
// vendor that does not answer counts 0.
func vendorMetric(vendors []*vendor, name string, labels ...string) float64 {
	sum := 0.0
	for _, v := range vendors {
		if _, body, err := fetch("http://"+v.httpAddr()+"/metrics", 5*time.Second); err == nil {
			sum += metric(body, name, labels...)
		}
	}
	return sum
}

// stopped counts the vendors no longer running, and fails the test for
// each.
func stopped(t testing.TB, vendors []*vendor) int {
	t.Helper()
	n := 0
	for _, v := range vendors {
		if !v.running() {
			n++
			t.Errorf("vendor %s stopped: %v\n%s", v.name, v.exitErr(), v.tail(20))
		}
	}
	return n
}

// unready counts the running vendors whose /readyz is not 200, or that
// say they cannot see another vendor, and fails the test for each.
func unready(t testing.TB, vendors []*vendor) int {
	t.Helper()
	n := 0
	for _, v := range vendors {
		if !v.running() {
			continue
		}
		var code int
		var body string
		ok := within(15*time.Second, func() bool {
			code, body, _ = fetch("http://"+v.httpAddr()+"/readyz", 5*time.Second)
			return code == http.StatusOK && !strings.Contains(body, "but this vendor")
		})
		if !ok {
			n++
			t.Errorf("vendor %s: /readyz %d %s", v.name, code, body)
		}
	}
	return n
}

// repeats counts the IDs of tallies and the repeats within each (each
// tally is an ID space of its own).
func repeats(tallies ...*tally) (total, dups int64) {
	for _, tl := range tallies {
		tl.mu.Lock()
		runs := slices.Clone(tl.runs)
		for _, id := range tl.ids {
			runs = append(runs, ids.Range{First: id, Count: 1})
		}
		tl.mu.Unlock()
		n, _, d, _ := overlaps(runs)
		total, dups = total+n, dups+d
	}
	return total, dups
}

// attackLoad is leaf-client asking for IDs on several subjects, each into
// a tally of its own, before, during and after an attack.
type attackLoad struct {
	tallies []*tally
	drivers []*driver
}

func startAttackLoad(t testing.TB, nc *nats.Conn, name string, spec loadSpec, subjects ...string) *attackLoad {
	t.Helper()
	l := &attackLoad{}
	for _, s := range subjects {
		tl := newTally(name + ": " + s)
		spec.subject = s
		l.tallies = append(l.tallies, tl)
		l.drivers = append(l.drivers, startLoad(t, nc, tl, spec))
	}
	return l
}

// progressed waits until every subject got n more replies with IDs, and
// reports whether they did within timeout.
func (l *attackLoad) progressed(n int, timeout time.Duration) bool {
	base := make([]int, len(l.tallies))
	for i, tl := range l.tallies {
		_, base[i] = tl.counts()
	}
	return within(timeout, func() bool {
		for i, tl := range l.tallies {
			if _, ok := tl.counts(); ok < base[i]+n {
				return false
			}
		}
		return true
	})
}

func (l *attackLoad) stop() {
	for _, d := range l.drivers {
		d.stop()
	}
}

// errs adds up the failed requests of every subject.
func (l *attackLoad) errs() map[string]int {
	out := map[string]int{}
	for _, tl := range l.tallies {
		tl.mu.Lock()
		for code, n := range tl.errs {
			out[code] += n
		}
		tl.mu.Unlock()
	}
	return out
}

// check checks every tally: no repeats, no contract violations.
func (l *attackLoad) check(t testing.TB) {
	t.Helper()
	for _, tl := range l.tallies {
		tl.check(t)
	}
}

// serviceIDs are the micro service IDs of the running vendors ($SRV.PING),
// which name their leaf.waited.<id> endpoints.
func serviceIDs(t testing.TB, admin *nats.Conn) []string {
	t.Helper()
	var out []string
	for _, m := range askAll(t, admin, "$SRV.PING."+vending.ServiceName, time.Second) {
		var info struct{ ID string }
		if json.Unmarshal(m.Data, &info) == nil && info.ID != "" {
			out = append(out, info.ID)
		}
	}
	return out
}

// replyTargets are the reply subjects of issue 19's first attack: every
// bucket's key a vendor's state rests on (the strict tag ledger, the tag
// order, the worker IDs held), JetStream API requests that destroy a
// bucket, and the vendors' own subjects.
func replyTargets(workerIDs []int, services []string) []string {
	out := []string{
		"$KV.leaf_segments.order", "$KV.leaf_segments.ledger", "$KV.leaf_segments.=store",
		"$KV.leaf_cluster.contract", "$KV.leaf_strict_leaders.ledger", "$KV.leaf_segment_marks.order",
		"$JS.API.STREAM.DELETE.KV_leaf_workers", "$JS.API.STREAM.PURGE.KV_leaf_segments",
		"$JS.API.STREAM.DELETE.KV_leaf_cluster", "$JS.API.STREAM.PURGE.KV_leaf_worker_clocks",
		"$SRV.STATS.leaf", "$SYS.REQ.SERVER.PING.VARZ",
		"leaf.peers", "leaf.peers.mark", "leaf.strict.ledger", "leaf.snowflake", "leaf.segment.order",
	}
	for _, id := range workerIDs {
		out = append(out, "$KV.leaf_worker_clocks."+workerKey(id), "$KV.leaf_workers."+workerKey(id))
	}
	for _, id := range services {
		out = append(out, "leaf.waited."+id, "leaf.waited."+id+".counted")
	}
	return out
}

// forgedRequests are requests on each client subject whose reply subject
// is each of replies (under each, for an inbox prefix ending with a dot):
// a snowflake, a segment of a normal and of a strict tag and one in the
// ranges encoding; or, with decode, a decode of id, whose reply is JSON
// that a store taking it as a write reads as a row of zeros.
func forgedRequests(replies []string, decode bool, id int64) []*nats.Msg {
	kinds := []struct {
		subject, body string
		ranges        bool
	}{{"leaf.snowflake", "1", false}, {"leaf.segment.order", "1", false}, {"leaf.segment.ledger", "1", false}, {"leaf.segment.order", "3", true}}
	if decode {
		kinds = kinds[:0]
		kinds = append(kinds, struct {
			subject, body string
			ranges        bool
		}{"leaf.snowflake.decode", strconv.FormatInt(id, 10), false})
	}
	var out []*nats.Msg
	for _, reply := range replies {
		for _, k := range kinds {
			m := nats.NewMsg(k.subject)
			m.Reply, m.Data = reply, []byte(k.body)
			if strings.HasSuffix(reply, ".") {
				// An inbox prefix: a reply subject of its own for each
				// request, as NATS lets a responder answer each once.
				m.Reply += "forged" + strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.Itoa(len(out))
			}
			if k.ranges {
				m.Header.Set(vending.EncodingHeader, vending.EncodingRanges)
			}
			out = append(out, m)
		}
	}
	return out
}

// sendForged publishes reqs on nc and returns how many it sent.
func sendForged(t testing.TB, nc *nats.Conn, reqs []*nats.Msg) int {
	t.Helper()
	for _, m := range reqs {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatalf("publish %s reply %s: %v", m.Subject, m.Reply, err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return len(reqs)
}

// sniffInboxes listens on _INBOX.> as a user of account LEAF, which sees
// the replies to the vendors' own JetStream requests there, and returns a
// inbox prefix seen but nc's own (forgedRequests makes a reply subject
// under each): what an attacker inside the account would aim at the
// vendors' pending requests.
func sniffInboxes(t testing.TB, nc *nats.Conn, wait time.Duration) []string {
	t.Helper()
	sub, err := nc.SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	mine := vending.RequestInbox(nc)
	seen := map[string]bool{}
	deadline := time.Now().Add(wait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		// A push consumer's messages (KV watchers) keep their stream
		// subject: only replies to requests are under _INBOX.
		if tok := strings.Split(m.Subject, "."); len(tok) >= 3 && tok[0] == "_INBOX" {
			if p := tok[0] + "." + tok[1] + "."; p != mine {
				seen[p] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// dropped adds up the vendors' leaf_requests_dropped_total for why.
func dropped(vendors []*vendor, why string) int {
	return int(vendorMetric(vendors, "leaf_requests_dropped_total", `reason="`+why+`"`))
}

// TestAttackReplySubjects is issue 19's first attack: requests whose reply
// subject names a key of the vendors' buckets, a JetStream API request or
// a vendor's own subject, sent under load (a) by leaf-client, whose reply
// subjects the account boundary maps into its own account, and (b) by
// leaf-inside, a user of the vendors' account LEAF allowed only the client
// subjects, whom only the vendors' reply guard stops; (b) also aims at the
// inboxes the vendors' own JetStream requests wait on, sniffed from
// _INBOX.>. No bucket may change but as vendors change it, no write may be
// one no vendor makes, every vendor keeps running and ready, the IDs
// collected before, during and after hold no repeat, and every request of
// (b) is counted dropped.
func TestAttackReplySubjects(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	start := time.Now()
	d := startDocsNATS(t)
	vendorCommand(t, d.env("leaf-admin"), "tags", "add", "order", "-step", "1000")
	vendorCommand(t, d.env("leaf-admin"), "tags", "add", "ledger", "-strict", "-step", "1000")
	vendors := startVendors(t, "r", 2, d.env("leaf-vendor"))
	var workerIDs []int
	for _, v := range vendors {
		workerIDs = append(workerIDs, v.waitServing())
	}
	admin, _ := d.connect(t, "leaf-admin")
	js := d.js(t)
	client, _ := d.connect(t, "leaf-client")
	inside, _ := d.connect(t, "leaf-inside")
	load := startAttackLoad(t, client, "attack replies", loadSpec{batch: 10, clients: 1, timeout: 5 * time.Second, pace: 20 * time.Millisecond},
		"leaf.snowflake", "leaf.segment.order", "leaf.segment.ledger")
	if !load.progressed(20, 60*time.Second) {
		t.Fatalf("no IDs before the attack: %v", load.errs())
	}
	targets := replyTargets(workerIDs, serviceIDs(t, admin))
	decodeID := load.tallies[0].snapshotIDs()[0]
	before, errsBefore := readBuckets(t, js), load.errs()
	watch := watchBuckets(t, js)
	own := sniffInboxes(t, inside, 2*time.Second)

	sentClient, sentInside, sentOwn, during := 0, 0, 0, true
	for range scaled(3) {
		// The decodes last: a store that took the replies as writes would
		// keep their rows of zeros.
		for _, decode := range []bool{false, true} {
			sentClient += sendForged(t, client, forgedRequests(targets, decode, decodeID))
			sentInside += sendForged(t, inside, forgedRequests(targets, decode, decodeID))
			sentOwn += sendForged(t, inside, forgedRequests(own, decode, decodeID))
			during = load.progressed(10, 10*time.Second) && during
		}
	}
	countedAll := within(15*time.Second, func() bool { return dropped(vendors, vending.DropNotInbox) >= sentInside })
	after := load.progressed(20, 30*time.Second)
	load.stop()
	writes, forged, examples := watch.counts()
	watch.stop()
	changes := before.changes(readBuckets(t, js))
	notInbox, ownInbox := dropped(vendors, vending.DropNotInbox), dropped(vendors, vending.DropOwnInbox)
	// leaf-client's answers sent to a client subject (leaf.snowflake,
	// leaf.segment.order) come back through its account's imports, as
	// requests with no reply subject.
	noReply := dropped(vendors, vending.DropNoReply)
	total, dups := repeats(load.tallies...)
	down, notReady := stopped(t, vendors), unready(t, vendors)
	report(t, "attack reply subjects: %d targets; sent leaf-client=%d leaf-inside=%d (own inboxes %d, %d prefixes); dropped no-inbox=%d own-inbox=%d "+
		"no-reply=%d; bucket writes=%d forged=%d changes=%d; ids=%d repeats=%d errors before=%s in all=%s; stopped=%d unready=%d elapsed=%v",
		len(targets), sentClient, sentInside, sentOwn, len(own), notInbox, ownInbox, noReply, writes, forged, len(changes),
		total, dups, formatErrs(errsBefore), formatErrs(load.errs()), down, notReady, time.Since(start).Round(100*time.Millisecond))
	for _, c := range changes {
		t.Errorf("bucket changed: %s", c)
	}
	for _, e := range examples {
		t.Errorf("a write no vendor makes: %s", e)
	}
	if !during || !after {
		t.Errorf("the load stalled during (%v) or after (%v) the attack: %v", !during, !after, load.errs())
	}
	// The shipped configuration lets a strict tag's leader answer the
	// clients of the requests other vendors hand it.
	for _, v := range vendors {
		if v.count("may answer clients only on the reply subjects") > 0 {
			t.Errorf("vendor %s may not answer handed-off requests under the shipped configuration", v.name)
		}
	}
	if !countedAll || notInbox != sentInside {
		t.Errorf("leaf_requests_dropped_total{reason=%q} is %d, want the %d requests of leaf-inside", vending.DropNotInbox, notInbox, sentInside)
	}
	if len(own) == 0 || ownInbox == 0 {
		t.Errorf("sniffed %d inbox prefixes, %d requests to them dropped as the vendors' own: want some of each", len(own), ownInbox)
	}
	load.check(t)
}

// refusedPublishes publishes on each subject as nc and counts those the
// server refuses (a permissions violation naming the subject), failing the
// test for each it lets through.
func refusedPublishes(t testing.TB, nc *nats.Conn, errs <-chan error, subjects ...string) int {
	t.Helper()
	refused := 0
	for _, subject := range subjects {
		if err := nc.Publish(subject, []byte("1000000000")); err != nil {
			t.Fatal(err)
		}
		nc.Flush()
		want := strings.ToLower(`publish to "` + subject + `"`)
		timeout := time.After(5 * time.Second)
	wait:
		for {
			select {
			case err := <-errs:
				if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(strings.ToLower(err.Error()), want) {
					refused++
					break wait
				}
			case <-timeout:
				t.Errorf("%s may publish on %s", nc.Opts.User, subject)
				break wait
			}
		}
	}
	return refused
}

// askCode sends n (in the ranges encoding) on subject and returns the
// reply's error code: 0 for IDs, -1 for no reply.
func askCode(nc *nats.Conn, subject string, n int64) int {
	req := nats.NewMsg(subject)
	req.Header.Set(vending.EncodingHeader, vending.EncodingRanges)
	req.Data = strconv.AppendInt(nil, n, 10)
	msg, err := nc.RequestMsg(req, 5*time.Second)
	if err != nil {
		return -1
	}
	code, _ := strconv.Atoi(msg.Header.Get(micro.ErrorCodeHeader))
	return code
}

// nextStrictID asks for one ID of a strict tag, whose IDs only grow.
func nextStrictID(t testing.TB, nc *nats.Conn, tl *tally, subject string) int64 {
	t.Helper()
	var got []int64
	var code string
	if !within(30*time.Second, func() bool {
		got, code = tl.request(nc, subject, 1, 5*time.Second)
		return code == ""
	}) {
		t.Fatalf("no ID of %s: %s %s", subject, code, tl.last(code))
	}
	return got[0]
}

// TestAttackVendorSubjects is issue 19's second attack: leaf-client may not
// publish on the vendors' own subjects (leaf.strict.>, leaf.waited.>,
// leaf.peers); a count above LEAF_MAX_RANGE_BATCH, on leaf.segment.<tag>
// from leaf-client or on leaf.strict.<tag> from a user of account LEAF
// (leaf-inside-strict), gets a 400 and takes nothing (the rows stay, the
// strict tag's next ID follows its last); and under
// LEAF_SEGMENT_RATE_LIMIT, range requests beyond the rate get 429 while the
// IDs handed out stay within it.
func TestAttackVendorSubjects(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	start := time.Now()
	const maxRange, rate = 100_000, 200_000
	d := startDocsNATS(t)
	for _, tag := range [][]string{{"order"}, {"idle"}, {"ledger", "-strict"}} {
		vendorCommand(t, d.env("leaf-admin"), append(append([]string{"tags", "add"}, tag...), "-step", "1000")...)
	}
	vendors := startVendors(t, "s", 2, d.env("leaf-vendor",
		"LEAF_MAX_RANGE_BATCH", strconv.Itoa(maxRange), "LEAF_SEGMENT_RATE_LIMIT", strconv.Itoa(rate)))
	js := d.js(t)
	client, clientErrs := d.connect(t, "leaf-client")
	insider, _ := d.connect(t, "leaf-inside-strict")
	vendorOnly := []string{"leaf.strict.ledger", "leaf.waited.x", "leaf.peers", "leaf.peers.mark"}
	refused := refusedPublishes(t, client, clientErrs, vendorOnly...)

	strictTl := newTally("attack counts: leaf.segment.ledger")
	last := nextStrictID(t, client, strictTl, "leaf.segment.ledger")
	before, droppedBefore := readBuckets(t, js), dropped(vendors, vending.DropNotInbox)
	codes := map[string]int{}
	for _, n := range []int64{maxRange + 1, 1 << 40, 12_000_000_000_000_000} {
		codes[fmt.Sprintf("segment %d", n)] = askCode(client, "leaf.segment.idle", n)
		codes[fmt.Sprintf("strict %d", n)] = askCode(insider, "leaf.strict.ledger", n)
	}
	// The leader's own guard: forwarded requests whose reply is no inbox.
	forged := sendForged(t, insider, forgedStrict())
	counted := within(5*time.Second, func() bool { return dropped(vendors, vending.DropNotInbox)-droppedBefore >= forged })
	next := nextStrictID(t, client, strictTl, "leaf.segment.ledger")
	after := readBuckets(t, js)
	changes := append(before.changes(after), before.grew(after, kv.SegmentBucket)...)
	taken, rateTl, window := rateWindow(t, client, len(vendors), rate, maxRange)
	total, dups := repeats(strictTl, rateTl)
	down, notReady := stopped(t, vendors), unready(t, vendors)
	report(t, "attack vendor subjects: leaf-client refused on %d of %d vendor subjects; over-large counts: %s; forged forwards %d, counted dropped %d; strict tag's next "+
		"ID +%d; store changes=%d; rate limit %d/s: %d IDs in %v (%.0f/s, bound %.0f), 429s=%d; ids=%d repeats=%d stopped=%d unready=%d elapsed=%v",
		refused, len(vendorOnly), formatErrs(codes), forged, dropped(vendors, vending.DropNotInbox)-droppedBefore, next-last, len(changes), rate, taken, window.Round(10*time.Millisecond),
		float64(taken)/window.Seconds(), rateBound(len(vendors), rate, maxRange, window), rateTl.errCount("429"),
		total, dups, down, notReady, time.Since(start).Round(100*time.Millisecond))
	for what, code := range codes {
		if code != 400 {
			t.Errorf("%s: code %d, want 400", what, code)
		}
	}
	if !counted {
		t.Errorf("leaf_requests_dropped_total{reason=%q} counted %d of the %d forwarded requests the leader dropped",
			vending.DropNotInbox, dropped(vendors, vending.DropNotInbox)-droppedBefore, forged)
	}
	if next != last+1 {
		t.Errorf("the strict tag's next ID is %d after %d: the refused counts took %d IDs", next, last, next-last-1)
	}
	for _, c := range changes {
		t.Errorf("bucket changed by refused counts: %s", c)
	}
	if float64(taken) > rateBound(len(vendors), rate, maxRange, window) || rateTl.errCount("429") == 0 {
		t.Errorf("%d IDs handed out in %v with %d 429s: want at most %.0f and some 429s",
			taken, window, rateTl.errCount("429"), rateBound(len(vendors), rate, maxRange, window))
	}
	strictTl.check(t)
	rateTl.check(t)
}

// forgedStrict are requests forwarded to a strict tag's leader whose reply
// subject is no inbox: what a user of account LEAF allowed leaf.strict.>
// could send.
func forgedStrict() []*nats.Msg {
	var out []*nats.Msg
	for _, reply := range []string{"$KV.leaf_strict_leaders.ledger", "$KV.leaf_segments.ledger", "leaf.peers", "leaf.strict.ledger"} {
		m := nats.NewMsg("leaf.strict.ledger")
		m.Reply, m.Data = reply, []byte("5")
		m.Header.Set(vending.EncodingHeader, vending.EncodingRanges)
		out = append(out, m)
	}
	return out
}

// rateBound is the most IDs of one tag vendors hand out in window at rate
// a second each: each may start with a full bucket of tokens, the larger
// of a second's worth and the largest range request (segment.Options).
func rateBound(vendors, rate, maxRange int, window time.Duration) float64 {
	return float64(vendors) * (float64(max(rate, maxRange)) + float64(rate)*window.Seconds())
}

// rateWindow asks for order's IDs in ranges of half LEAF_MAX_RANGE_BATCH
// from four clients for a few seconds, and returns the IDs handed out,
// their tally and how long the load ran.
func rateWindow(t testing.TB, nc *nats.Conn, vendors, rate, maxRange int) (int, *tally, time.Duration) {
	t.Helper()
	tl := newTally("attack rate limit: leaf.segment.order")
	begun := time.Now()
	load := startLoad(t, nc, tl, loadSpec{subject: "leaf.segment.order", batch: maxRange / 2, ranges: true, clients: 4,
		timeout: 5 * time.Second, pace: 5 * time.Millisecond})
	time.Sleep(scaled(3 * time.Second)) // the attack's stated duration
	load.stop()
	window := time.Since(begun)
	taken, _ := tl.counts()
	return taken, tl, window
}

// Connection holders: the machine's open-files limit is per process, so
// the idle connections of the third attack are held by copies of this
// test binary, each running TestAttackHTTPConnHolder alone.
const (
	holdAddrVar  = "LEAF_E2E_HOLD_ADDR"
	holdConnsVar = "LEAF_E2E_HOLD_CONNS"
)

// connHolder is no test: run in a process of its own by
// TestAttackIdleHTTPConnections (TestMain calls it when LEAF_E2E_HOLD_ADDR
// is set), it opens LEAF_E2E_HOLD_CONNS connections to LEAF_E2E_HOLD_ADDR,
// sends one request on each and keeps them open, says how many it holds on
// standard output, and closes them once standard input is closed.
func connHolder(addr string) int {
	n, err := strconv.Atoi(os.Getenv(holdConnsVar))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", holdConnsVar, err)
		return 2
	}
	conns, answered := holdConns(addr, n, time.Now().Add(60*time.Second))
	fmt.Printf("held %d answered %d\n", len(conns), answered)
	io.Copy(io.Discard, os.Stdin) // until the test closes it
	for _, c := range conns {
		c.Close()
	}
	return 0
}

// holdConns opens up to n connections to addr before deadline, each with
// one request for /healthz (answered or not), from 32 goroutines, and
// returns those open and how many requests were answered.
func holdConns(addr string, n int, deadline time.Time) (conns []net.Conn, answered int) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range 32 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) && time.Now().Before(deadline) {
				c, ok := holdOne(addr)
				mu.Lock()
				if c != nil {
					conns = append(conns, c)
				}
				if ok {
					answered++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return conns, answered
}

// holdOne opens a keep-alive connection and asks /healthz on it.
func holdOne(addr string) (net.Conn, bool) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, false
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: leaf\r\n\r\n"); err != nil {
		return c, false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return c, false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c, resp.StatusCode == http.StatusOK
}

// holders are the processes holding connections.
type holders struct {
	cmds     []*exec.Cmd
	stdins   []io.Closer
	held     atomic.Int64   // connections open
	served   atomic.Int64   // of which answered
	reported atomic.Int64   // holders that said so, or exited
	wg       sync.WaitGroup // the readers of their output
	once     sync.Once
}

// startHolders runs procs holders of n connections each to addr and waits
// until each says what it holds (or exits). They hold until release.
func startHolders(t testing.TB, addr string, procs, n int) *holders {
	t.Helper()
	h := &holders{}
	t.Cleanup(h.release)
	for range procs {
		cmd := exec.Command(os.Args[0])
		// The test binary's TestMain runs connHolder instead of the tests.
		cmd.Env = append(os.Environ(), holdAddrVar+"="+addr, holdConnsVar+"="+strconv.Itoa(n))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		h.cmds, h.stdins = append(h.cmds, cmd), append(h.stdins, stdin)
		h.wg.Go(func() {
			said := false
			for sc := bufio.NewScanner(stdout); sc.Scan(); { // until it exits
				var held, served int64
				if _, err := fmt.Sscanf(sc.Text(), "held %d answered %d", &held, &served); err == nil && !said {
					h.held.Add(held)
					h.served.Add(served)
					h.reported.Add(1)
					said = true
				}
			}
			if !said {
				h.reported.Add(1) // it exited without a word
			}
		})
	}
	eventually(t, 2*time.Minute, "every connection holder to report", func() bool {
		return h.reported.Load() == int64(procs)
	})
	return h
}

// release closes the holders' standard input, so that they close their
// connections and exit, and waits for them (killing one stuck for 30s).
func (h *holders) release() {
	h.once.Do(func() {
		for _, in := range h.stdins {
			in.Close()
		}
		done := make(chan struct{})
		go func() { // ends when every holder's output does: at its exit
			h.wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			for _, c := range h.cmds {
				c.Process.Kill()
			}
			<-done
		}
		for _, c := range h.cmds {
			c.Wait()
		}
	})
}

// openFiles counts the open file descriptors of process pid, -1 when it
// cannot.
func openFiles(pid int) int {
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}

// startWithSoftLimit starts v with the open-files soft limit lowered to
// soft, as a service manager may start it (the test's own limit is back
// at once: a child keeps the limit it was started with).
func startWithSoftLimit(t testing.TB, v *vendor, soft uint64) {
	t.Helper()
	var was syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &was); err != nil {
		t.Fatal(err)
	}
	low := was
	low.Cur = min(soft, was.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	v.start()
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &was); err != nil {
		t.Fatal(err)
	}
}

// fileLimits reads process pid's open-files limits, soft and hard.
func fileLimits(pid int) (soft, hard string) {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(strings.TrimPrefix(line, "Max open files")); len(f) >= 2 && strings.HasPrefix(line, "Max open files") {
			return f[0], f[1]
		}
	}
	return "?", "?"
}

// fdSampler records the most file descriptors a process held, sampled
// every 20ms, and how the health checks it sends every 200ms fared.
type fdSampler struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu                   sync.Mutex
	most                 int
	healthOK, healthFail int
}

func sampleFiles(t testing.TB, pid int, healthz string) *fdSampler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &fdSampler{cancel: cancel, most: openFiles(pid)}
	t.Cleanup(s.stop)
	s.wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			n := openFiles(pid)
			s.mu.Lock()
			s.most = max(s.most, n)
			s.mu.Unlock()
			if i%10 == 0 {
				code, _, _ := fetch(healthz, 2*time.Second)
				s.mu.Lock()
				if code == http.StatusOK {
					s.healthOK++
				} else {
					s.healthFail++
				}
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	})
	return s
}

func (s *fdSampler) stop() {
	s.cancel()
	s.wg.Wait()
}

func (s *fdSampler) counts() (most, healthOK, healthFail int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.most, s.healthOK, s.healthFail
}

// newClientIDs connects a new NATS client to url and asks it for IDs: what
// the embedded server stopped allowing in issue 19.
func newClientIDs(url string, tl *tally) error {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, code := tl.request(nc, "leaf.snowflake", 10, 5*time.Second); code != "" {
		return fmt.Errorf("%s: %s", code, tl.last(code))
	}
	return nil
}

// TestAttackIdleHTTPConnections is issue 19's third attack: 20,000 idle
// keep-alive connections to a vendor's HTTP port, held by four processes,
// while the vendor runs the embedded NATS server (no LEAF_NATS_URL) with
// the default LEAF_HTTP_MAX_CONNS. The vendor's open files stay within
// the cap and what it needs besides, /healthz answers on a new
// connection, a new NATS client connects and gets IDs, the vendor keeps
// running, and the IDs of a load throughout hold no repeat.
func TestAttackIdleHTTPConnections(t *testing.T) {
	start := time.Now()
	const procs, perProc, maxConns = 4, 5000, 1024 // LEAF_HTTP_MAX_CONNS's default
	natsURL := "nats://127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	v := newVendor(t, "h", map[string]string{"LEAF_NATS_LISTEN": strings.TrimPrefix(natsURL, "nats://")})
	startWithSoftLimit(t, v, 4096)
	v.waitServing()
	soft, hard := fileLimits(v.pid())
	healthz := "http://" + v.httpAddr() + "/healthz"
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	load := startAttackLoad(t, nc, "attack idle HTTP", loadSpec{batch: 10, clients: 1, timeout: 5 * time.Second, pace: 20 * time.Millisecond}, "leaf.snowflake")
	if !load.progressed(20, 30*time.Second) {
		t.Fatalf("no IDs before the attack: %v", load.errs())
	}
	base := openFiles(v.pid())
	sampler := sampleFiles(t, v.pid(), healthz)
	h := startHolders(t, "127.0.0.1"+v.httpAddr()[strings.LastIndexByte(v.httpAddr(), ':'):], procs, perProc)
	var code int
	healthy := within(15*time.Second, func() bool {
		code, _, _ = fetch(healthz, 2*time.Second)
		return code == http.StatusOK
	})
	natsErr := newClientIDs(natsURL, load.tallies[0])
	during := load.progressed(20, 15*time.Second)
	held := openFiles(v.pid())
	h.release()
	sampler.stop()
	most, healthOK, healthFail := sampler.counts()
	load.stop()
	total, dups := repeats(load.tallies...)
	down := stopped(t, []*vendor{v})
	report(t, "attack idle HTTP: vendor's open-files limit %s (hard %s, started with 4096); %d connections held of %d (%d answered); vendor open files %d before, at most %d, "+
		"%d while held (cap %d + %d); /healthz during %d ok %d failed, after %d; new NATS client: %v; ids=%d repeats=%d errors=%s stopped=%d elapsed=%v",
		soft, hard, h.held.Load(), procs*perProc, h.served.Load(), base, most, held, maxConns, base, healthOK, healthFail, code, natsErr,
		total, dups, formatErrs(load.errs()), down, time.Since(start).Round(100*time.Millisecond))
	if soft != hard {
		t.Errorf("the vendor's open-files soft limit is %s, not raised to the hard limit %s", soft, hard)
	}
	if most > base+maxConns+64 {
		t.Errorf("the vendor held %d files, more than %d before and %d HTTP connections", most, base, maxConns)
	}
	if !healthy {
		t.Errorf("/healthz answers %d on a new connection while the idle ones are held", code)
	}
	if natsErr != nil {
		t.Errorf("a new NATS client while the idle connections are held: %v", natsErr)
	}
	if !during {
		t.Errorf("the load stalled while the idle connections were held: %v", load.errs())
	}
	load.check(t)
}

// importTags adds n tags (t00001, t00002, ...) as leaf-admin with `vendor
// tags import`, as an operator moving from Leaf would: parts of the list
// at once, since each row is a write JetStream syncs to disk.
func importTags(t testing.TB, env map[string]string, n int) []string {
	t.Helper()
	const parts = 12
	tags := make([]string, n)
	files := make([]*strings.Builder, parts)
	for i := range files {
		files[i] = &strings.Builder{}
		files[i].WriteString("biz_tag,max_id,step,description\n")
	}
	for i := range tags {
		tags[i] = fmt.Sprintf("t%05d", i+1)
		fmt.Fprintf(files[i%parts], "%s,1,1000,attack tag %d\n", tags[i], i+1)
	}
	dir, procEnv := t.TempDir(), vendorEnv(t, env)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i, b := range files {
		file := filepath.Join(dir, fmt.Sprintf("leaf_alloc-%d.csv", i))
		if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, vendorBin, "tags", "import", file)
			cmd.Env = procEnv
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("vendor tags import %s: %v\n%s", file, err, out)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return tags
}

// statsReplies asks every vendor for its micro stats ($SRV.STATS.leaf, as
// `nats micro stats leaf` does) and returns the size of each reply, the
// instances they name (in the snowflake endpoint's data) and the errors
// replied instead.
func statsReplies(t testing.TB, nc *nats.Conn) (sizes []int, instances, errs []string) {
	t.Helper()
	for _, m := range askAll(t, nc, status.StatsSubject, 2*time.Second) {
		sizes = append(sizes, len(m.Data))
		if e := m.Header.Get(micro.ErrorHeader); e != "" {
			errs = append(errs, m.Header.Get(micro.ErrorCodeHeader)+" "+e)
			continue
		}
		var st micro.Stats
		if err := json.Unmarshal(m.Data, &st); err != nil {
			errs = append(errs, fmt.Sprintf("%d bytes that do not parse: %v", len(m.Data), err))
			continue
		}
		for _, ep := range st.Endpoints {
			var s status.Status
			if ep.Name == vending.EndpointSnowflake && json.Unmarshal(ep.Data, &s) == nil {
				instances = append(instances, s.Instance)
			}
		}
	}
	return sizes, instances, errs
}

// clusterTable returns the instances each vendor's /cluster.json lists,
// asking again a few times: the table waits only a moment for the others.
func clusterTable(vendors []*vendor) [][]string {
	out := make([][]string, len(vendors))
	for i, v := range vendors {
		within(5*time.Second, func() bool {
			out[i] = nil
			_, body, err := fetch("http://"+v.httpAddr()+"/cluster.json", 5*time.Second)
			var list []status.ClusterEntry
			if err != nil || json.Unmarshal([]byte(body), &list) != nil {
				return false
			}
			for _, e := range list {
				out[i] = append(out[i], e.Data.Instance)
			}
			return len(out[i]) == len(vendors)
		})
	}
	return out
}

// peerAnswers asks leaf.peers as leaf-admin and returns the answers that
// decode as a vendor's.
func peerAnswers(t testing.TB, nc *nats.Conn) (n, most int) {
	t.Helper()
	for _, m := range askAll(t, nc, cluster.PeersSubject(vending.DefaultPrefix), time.Second) {
		if _, err := cluster.DecodePeer(m.Data); err == nil {
			n, most = n+1, max(most, len(m.Data))
		}
	}
	return n, most
}

// TestAttackManyTags is issue 19's fourth attack: 3,000 tags (past the
// 2,560 at which every vendor's micro stats outgrew max_payload), served by
// two vendors. Each vendor's $SRV.STATS.leaf reply arrives and parses, each
// /cluster.json lists both vendors, leaf_peers_unseen is 0, each /readyz is
// ready (it would say which vendors this one cannot see), both answer on
// the vendors' exchange (leaf.peers), and the IDs hold no repeat.
func TestAttackManyTags(t *testing.T) {
	start := time.Now()
	d := startDocsNATS(t)
	tags := importTags(t, d.env("leaf-admin"), 3000)
	imported := time.Since(start)
	vendors := startVendors(t, "m", 2, d.env("leaf-vendor"))
	admin, _ := d.connect(t, "leaf-admin")
	client, _ := d.connect(t, "leaf-client")
	load := startAttackLoad(t, client, "attack many tags", loadSpec{batch: 10, clients: 1, timeout: 5 * time.Second, pace: 20 * time.Millisecond},
		"leaf.snowflake", "leaf.segment."+tags[0], "leaf.segment."+tags[len(tags)-1])
	if !load.progressed(20, 60*time.Second) {
		t.Fatalf("no IDs: %v", load.errs())
	}
	// Every vendor lists every tag at its start: each tag is in its
	// stats whether asked for or not.
	known := within(30*time.Second, func() bool {
		for _, v := range vendors {
			_, body, err := fetch("http://"+v.httpAddr()+"/metrics", 5*time.Second)
			if err != nil || metric(body, "leaf_segment_tags") < float64(len(tags)) {
				return false
			}
		}
		return true
	})
	sizes, instances, statsErrs := statsReplies(t, admin)
	table := clusterTable(vendors)
	unseen := vendorMetric(vendors, "leaf_peers_unseen")
	peers, peerBytes := peerAnswers(t, admin)
	after := load.progressed(20, 30*time.Second)
	load.stop()
	total, dups := repeats(load.tallies...)
	down, notReady := stopped(t, vendors), unready(t, vendors)
	report(t, "attack many tags: %d tags (imported in %v, known to every vendor: %v); stats replies %d of %d, bytes %v (max_payload %d); /cluster.json lists %v; "+
		"leaf_peers_unseen=%.0f; leaf.peers answers %d (at most %d bytes); ids=%d repeats=%d errors=%s stopped=%d unready=%d elapsed=%v",
		len(tags), imported.Round(100*time.Millisecond), known, len(sizes), len(vendors), sizes, admin.MaxPayload(), tableSizes(table), unseen, peers, peerBytes,
		total, dups, formatErrs(load.errs()), down, notReady, time.Since(start).Round(100*time.Millisecond))
	if !known {
		t.Errorf("the vendors do not both list the %d tags", len(tags))
	}
	if len(sizes) != len(vendors) || len(instances) != len(vendors) {
		t.Errorf("%d stats replies naming %d vendors, want %d: `nats micro stats leaf` misses vendors; errors: %q", len(sizes), len(instances), len(vendors), statsErrs)
	}
	for i, list := range table {
		if len(list) != len(vendors) || slices.Contains(list, "") {
			t.Errorf("vendor %s's /cluster.json lists %q, want both vendors", vendors[i].name, list)
		}
	}
	if unseen != 0 || peers != len(vendors) {
		t.Errorf("leaf_peers_unseen is %.0f and %d vendors answer on leaf.peers, want 0 and %d", unseen, peers, len(vendors))
	}
	if !after {
		t.Errorf("the load stalled: %v", load.errs())
	}
	load.check(t)
}

// tableSizes is how many vendors each cluster table lists.
func tableSizes(table [][]string) []int {
	out := make([]int, len(table))
	for i, list := range table {
		out[i] = len(list)
	}
	return out
}
