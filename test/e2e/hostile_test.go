package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/internal/pgtest"
	"github.com/leaf-nats/leaf/kv"
)

// hostile is one malformed request and the code it must get: 400, 404,
// or 0 for subjects NATS itself may refuse, where any outcome but a crash
// or IDs is acceptable.
type hostile struct {
	name    string
	subject string // after the prefix and a dot
	body    []byte
	code    int
	word    string // the error message must mention it
}

func hostileRequests() []hostile {
	const maxPayload = 1 << 20 // the server's default max_payload
	huge := bytes.Repeat([]byte("9"), maxPayload-4096)
	junk := bytes.Repeat([]byte{0xff, 0x00, 'x'}, (maxPayload-4096)/3)
	var hs []hostile
	for _, subj := range []string{"snowflake", "segment.order"} {
		for _, c := range []struct {
			name string
			body string
		}{
			{"zero", "0"}, {"minus one", "-1"}, {"10^12", "1000000000000"}, {"2^63", "9223372036854775808"},
			{"1e3", "1e3"}, {"plus", "+5"}, {"hex", "0x10"}, {"over max batch", "10001"},
			{"inner space", "1 0"}, {"NUL after", "5\x00"}, {"NUL before", "\x005"}, {"only NUL", "\x00"},
			{"non-UTF-8", "\xff\xfe"}, {"arabic digits", "١٢"}, {"fullwidth digit", "５"},
			{"JSON", `{"count":5}`}, {"SQL", "5; DROP TABLE leaf_alloc"},
		} {
			hs = append(hs, hostile{subj + " count " + c.name, subj, []byte(c.body), 400, "count"})
		}
		hs = append(hs,
			hostile{subj + " 1MB of digits", subj, huge, 400, "count"},
			hostile{subj + " 1MB of junk", subj, junk, 400, "count"},
		)
	}
	for _, c := range []struct {
		name, tag string
		code      int
		word      string
	}{
		{"200 characters", strings.Repeat("a", 200), 400, "tag"},
		{"129 characters", strings.Repeat("b", 129), 400, "tag"},
		{"single quote", "o'rder", 400, "tag"},
		{"SQL", "order';DROP_TABLE_leaf_alloc;--", 400, "tag"},
		{"SQL OR", "x'OR'1'='1", 400, "tag"},
		{"double quotes", `"order"`, 400, "tag"},
		{"backslash", `ord\er`, 400, "tag"},
		{"percent", "ord%er", 400, "tag"},
		{"unicode", "订单", 400, "tag"},
		{"emoji", "order🙂", 400, "tag"},
		{"non-UTF-8", "ord\xffer", 400, "tag"},
		{"NUL", "ord\x00er", 400, "tag"},
		{"unknown", "nosuchtag", 404, "tag"},
		{"unknown nested", "order.eu", 404, "tag"},
		{"other case", "ORDER", 404, "tag"},
		// NATS's own subject syntax: wildcards, empty tokens, white space.
		{"star", "*", 0, "tag"},
		{"gt", ">", 0, "tag"},
		{"star nested", "order.*", 0, "tag"},
		{"empty token", "a..b", 0, "tag"},
		{"trailing dot", "order.", 0, "tag"},
		{"space", "or der", 0, "tag"},
		{"tab", "or\tder", 0, "tag"},
		{"CRLF", "order\r\nPUB x 1", 0, "tag"},
	} {
		hs = append(hs, hostile{"tag " + c.name, "segment." + c.tag, nil, c.code, c.word})
	}
	for _, body := range []string{"abc", "0", "-1", "99999999999999999999", "1e3", ""} {
		hs = append(hs, hostile{"decode " + strconv.Quote(body), "snowflake.decode", []byte(body), 400, "ID"})
	}
	return hs
}

// TestHostileRequests sends malformed requests to two running vendors, one
// keeping segments in Postgres and one in JetStream KV. Each must get a 400
// or 404 with a message saying what is wrong, or, for subjects NATS cannot
// route, anything but IDs; the vendors must keep running and serving, and
// neither store may change.
func TestHostileRequests(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	start := time.Now()
	// One NATS per store: vendors sharing a NATS share one segment store
	// (the cluster contract).
	clusters := map[string]*natsCluster{"kv": startNATS(t), "pg": startNATS(t)}
	dsn := pgtest.DSN(t)
	kvEnv := map[string]string{"LEAF_NATS_URL": clusters["kv"].url(), "LEAF_SUBJECT_PREFIX": "kv"}
	pgEnv := with(kvEnv, "LEAF_NATS_URL", clusters["pg"].url(), "LEAF_SUBJECT_PREFIX", "pg", "LEAF_POSTGRES_URL", dsn)
	for _, env := range []map[string]string{kvEnv, pgEnv} {
		vendorCommand(t, env, "tags", "add", "order", "-step", "1000")
	}
	vendors := []*vendor{startVendor(t, "kv", kvEnv), startVendor(t, "pg", pgEnv)}
	conns := map[string]*nats.Conn{"kv": clusters["kv"].conn(t), "pg": clusters["pg"].conn(t)}
	// One tally per subject: the two stores' segment IDs are separate spaces.
	valid := map[string]*tally{}
	ask := func(when string) {
		for _, p := range []string{"kv", "pg"} {
			for _, subj := range []string{".snowflake", ".segment.order"} {
				tl := valid[p+subj]
				if tl == nil {
					tl = newTally("hostile: valid " + p + subj)
					valid[p+subj] = tl
				}
				if _, code := tl.request(conns[p], p+subj, 3, 10*time.Second); code != "" {
					t.Fatalf("%s%s %s: %s %s", p, subj, when, code, tl.last(code))
				}
			}
		}
	}
	ask("before the hostile requests")
	js, err := jetstream.New(conns["kv"])
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pgBefore, kvBefore := pgRows(t, db), kvRows(t, js)

	codes := map[string]int{}
	for _, prefix := range []string{"kv", "pg"} {
		for _, h := range hostileRequests() {
			t.Run(prefix+" "+h.name, func(t *testing.T) {
				outcome := sendHostile(t, clusters[prefix], prefix+"."+h.subject, h)
				codes[outcome]++
			})
		}
	}

	crashes, changes := 0, 0
	for _, v := range vendors {
		if !v.running() {
			crashes++
			t.Errorf("vendor %s exited: %v", v.name, v.exitErr())
		}
		for _, bad := range []string{"panic", "internal error", "goroutine "} {
			if n := v.count(bad); n > 0 {
				crashes++
				t.Errorf("vendor %s logged %q %d times", v.name, bad, n)
			}
		}
	}
	ask("after the hostile requests")
	if got := pgRows(t, db); got != pgBefore {
		changes++
		t.Errorf("leaf_alloc changed:\nbefore %s\nafter  %s", pgBefore, got)
	}
	if got := kvRows(t, js); got != kvBefore {
		changes++
		t.Errorf("%s changed:\nbefore %s\nafter  %s", kv.SegmentBucket, kvBefore, got)
	}
	for _, tl := range valid {
		tl.check(t)
	}
	report(t, "hostile requests: sent=%d outcomes=%s store-changes=%d crashes=%d elapsed=%v",
		2*len(hostileRequests()), formatErrs(codes), changes, crashes, time.Since(start).Round(100*time.Millisecond))
}

// sendHostile sends h on its own connection, since NATS may close a
// connection that sends a malformed subject, and returns the outcome.
func sendHostile(t *testing.T, c *natsCluster, subject string, h hostile) string {
	nc, err := nats.Connect(c.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msg, err := nc.Request(subject, h.body, 3*time.Second)
	if err != nil {
		if h.code != 0 {
			t.Errorf("%.80q: %v, want a %d reply", subject, err, h.code)
		}
		t.Logf("%.80q: NATS: %v", subject, err)
		return err.Error()
	}
	code, _ := strconv.Atoi(msg.Header.Get(micro.ErrorCodeHeader))
	text := msg.Header.Get(micro.ErrorHeader)
	switch {
	case code == 0:
		t.Errorf("%.80q body %.40q: answered with IDs %.60q", subject, h.body, msg.Data)
	case h.code != 0 && code != h.code, h.code == 0 && code != 400 && code != 404:
		t.Errorf("%.80q body %.40q: code %d (%s), want %d", subject, h.body, code, text, h.code)
	case string(msg.Data) != text:
		t.Errorf("%.80q: error reply's body %.60q is not its sentence", subject, msg.Data)
	case !strings.Contains(text, h.word) || len(text) > 400:
		t.Errorf("%.80q body %.40q: message %q should mention %q and be short", subject, h.body, text, h.word)
	}
	if tag, ok := strings.CutPrefix(h.subject, "segment."); ok && code == 400 {
		checkNamedChar(t, tag, text)
	}
	t.Logf("%.80q body %.40q: %d %s", subject, h.body, code, text)
	return strconv.Itoa(code)
}

// namedChar matches the character a tag error names.
var namedChar = regexp.MustCompile(`contains ('(?:[^'\\]|\\.)+')`)

// checkNamedChar fails the test when a tag error names a character the
// tag does not contain (as when a byte of a UTF-8 sequence is shown as a
// rune of its own: "订单" contains 'è').
func checkNamedChar(t testing.TB, tag, text string) {
	t.Helper()
	m := namedChar.FindStringSubmatch(text)
	if m == nil {
		return
	}
	c, err := strconv.Unquote(m[1])
	if err != nil || !strings.Contains(tag, c) {
		t.Errorf("tag %q: the message %q names a character the tag does not contain", tag, text)
	}
}

// pgRows renders the leaf_alloc table.
func pgRows(t testing.TB, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query(`SELECT biz_tag, max_id, step, coalesce(description, ''), update_time FROM leaf_alloc ORDER BY biz_tag`)
	if err != nil {
		t.Fatalf("read leaf_alloc: %v", err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var tag, desc string
		var maxID, step int64
		var updated time.Time
		if err := rows.Scan(&tag, &maxID, &step, &desc, &updated); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "[%s %d %d %q %s]", tag, maxID, step, desc, updated.Format(time.RFC3339Nano))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// kvRows renders the leaf_segments bucket.
func kvRows(t testing.TB, js jetstream.JetStream) string {
	t.Helper()
	ctx := context.Background()
	b, err := js.KeyValue(ctx, kv.SegmentBucket)
	if err != nil {
		t.Fatalf("open %s: %v", kv.SegmentBucket, err)
	}
	st, err := b.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := b.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "values=%d ", st.Values())
	for _, k := range keys {
		e, err := b.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "[%s rev %d %s]", k, e.Revision(), e.Value())
	}
	return out.String()
}
