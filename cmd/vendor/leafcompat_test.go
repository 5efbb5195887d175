package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/internal/leaftest"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/pgtest"
	"github.com/leaf-nats/leaf/leafcompat"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// leafGet requests url with method and returns the status, the
// Content-Type and the body.
func leafGet(t *testing.T, method, url string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestLeafAPI requests Leaf's HTTP API of a running vendor as Leaf's
// clients do, and checks every answer against leaf-server's: the ID alone
// on success, Spring's JSON error with Leaf's Result for a failure, Spring's
// 404 for a path with no key.
func TestLeafAPI(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	t.Setenv("LEAF_NATS_STORE_DIR", t.TempDir())
	var out bytes.Buffer
	if code := run(context.Background(), []string{"tags", "add", "leaf-segment-test", "-step", "2000"}, &out, &out); code != 0 {
		t.Fatalf("tags add: %d %s", code, out.String())
	}
	_, logs := startVendor(t, map[string]string{"LEAF_HTTP_LEAF_API": "true"})
	base := strings.TrimSuffix(httpURL(t, logs), "/")

	type want struct {
		status  int
		ctype   string
		body    string // exact, or for JSON the message
		exclass string // the exception of a JSON error
	}
	const text, jsonType = "text/plain;charset=UTF-8", "application/json;charset=UTF-8"
	leafErr := "com.sankuai.inf.leaf.server.exception.LeafServerException"
	for _, tc := range []struct {
		method, path string
		want         want
	}{
		// leaf-server's README: the first ID of a new tag with max_id 1 is 1.
		{"GET", "/api/segment/get/leaf-segment-test", want{200, text, "1", ""}},
		{"GET", "/api/segment/get/leaf-segment-test", want{200, text, "2", ""}},
		// Leaf maps no method: any is answered.
		{"POST", "/api/segment/get/leaf-segment-test", want{200, text, "3", ""}},
		// Spring matches a trailing slash.
		{"GET", "/api/segment/get/leaf-segment-test/", want{200, text, "4", ""}},
		{"GET", "/api/segment/get/nosuch", want{500, jsonType, "Result{id=-2, status=EXCEPTION}", leafErr}},
		// A tag leaf-nats cannot hold is one it does not have.
		{"GET", "/api/segment/get/bad*tag", want{500, jsonType, "Result{id=-2, status=EXCEPTION}", leafErr}},
		// No key: no controller maps the path.
		{"GET", "/api/segment/get/", want{404, jsonType, "No message available", ""}},
		{"GET", "/api/snowflake/get/", want{404, jsonType, "No message available", ""}},
		{"GET", "/api/segment/get/a/b", want{404, jsonType, "No message available", ""}},
		{"GET", "/api/tags/add/x", want{404, jsonType, "No message available", ""}},
	} {
		status, ctype, body := leafGet(t, tc.method, base+tc.path)
		if tc.want.exclass == "" && tc.want.status == 200 {
			if status != 200 || ctype != tc.want.ctype || body != tc.want.body {
				t.Errorf("%s %s: %d %q %q, want %d %q %q", tc.method, tc.path, status, ctype, body, tc.want.status, tc.want.ctype, tc.want.body)
			}
			continue
		}
		var e leafcompat.SpringError
		if status != tc.want.status || ctype != tc.want.ctype || json.Unmarshal([]byte(body), &e) != nil ||
			e.Status != tc.want.status || e.Error != http.StatusText(tc.want.status) || e.Message != tc.want.body ||
			e.Exception != tc.want.exclass || e.Path != tc.path || e.Timestamp < time.Now().Add(-time.Minute).UnixMilli() {
			t.Errorf("%s %s: %d %q %s, want %d %q with message %q, exception %q", tc.method, tc.path, status, ctype, body,
				tc.want.status, tc.want.ctype, tc.want.body, tc.want.exclass)
		}
	}

	// Snowflake: the key is ignored, as Leaf does; the ID decodes to this
	// vendor's worker ID.
	var sfs []int64
	for _, key := range []string{"leaf-snowflake-test", "anything", "x"} {
		status, ctype, body := leafGet(t, "GET", base+"/api/snowflake/get/"+key)
		id, err := strconv.ParseInt(body, 10, 64)
		if status != 200 || ctype != text || err != nil || id <= 0 {
			t.Fatalf("snowflake %s: %d %q %q", key, status, ctype, body)
		}
		sfs = append(sfs, id)
	}
	msg, err := nc.Request("leaf.snowflake.decode", []byte(strconv.FormatInt(sfs[0], 10)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var dec struct {
		WorkerID int `json:"worker_id"`
	}
	parts, err := snowflake.Decode(sfs[0], snowflake.DefaultEpoch)
	if err != nil || json.Unmarshal(msg.Data, &dec) != nil || parts.WorkerID != dec.WorkerID {
		t.Fatalf("decode %d: %s (%+v, %v)", sfs[0], msg.Data, parts, err)
	}
	if !(sfs[0] < sfs[1] && sfs[1] < sfs[2]) {
		t.Fatalf("snowflake IDs not increasing: %v", sfs)
	}

	// Concurrency: HTTP and NATS clients take from the same tag at once;
	// every ID is handed out once.
	const clients, each = 16, 100
	var (
		mu       sync.Mutex
		seen     = map[int64]string{}
		busy     int // HTTP requests told to back off
		natsBusy int // NATS requests told to back off
		errs     []string
		wg       sync.WaitGroup
	)
	note := func(id int64, by string) {
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := seen[id]; dup {
			errs = append(errs, "ID "+strconv.FormatInt(id, 10)+" twice: "+prev+" and "+by)
		}
		seen[id] = by
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for c := range clients {
		wg.Go(func() {
			for range each {
				if c%2 == 0 {
					msg, err := nc.Request("leaf.segment.leaf-segment-test", []byte("3"), 5*time.Second)
					if err == nil && msg.Header.Get(micro.ErrorCodeHeader) == "503" { // a slow store load
						mu.Lock()
						natsBusy++
						mu.Unlock()
						continue
					}
					var ids []int64
					if err == nil {
						ids, err = vending.DecodeText(nil, msg.Data)
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, "NATS: "+err.Error())
						mu.Unlock()
						continue
					}
					for _, id := range ids {
						note(id, "NATS")
					}
					continue
				}
				resp, err := client.Get(base + "/api/segment/get/leaf-segment-test")
				if err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable { // told to back off
					mu.Lock()
					busy++
					mu.Unlock()
					continue
				}
				id, err := strconv.ParseInt(string(b), 10, 64)
				if resp.StatusCode != 200 || err != nil || id <= 0 {
					mu.Lock()
					errs = append(errs, "HTTP "+resp.Status+": "+string(b))
					mu.Unlock()
					continue
				}
				note(id, "HTTP")
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, first: %s", len(errs), errs[0])
	}
	if want := clients / 2 * each * 4; len(seen) < want-busy-3*natsBusy {
		t.Fatalf("%d distinct IDs, want %d (%d HTTP and %d NATS requests told to back off)", len(seen), want, busy, natsBusy)
	}
	t.Logf("%d distinct segment IDs from %d HTTP and NATS clients, 0 duplicates, %d HTTP and %d NATS 503s", len(seen), clients, busy, natsBusy)

	_, _, metrics := leafGet(t, "GET", base+"/metrics")
	for _, w := range []string{
		`leaf_http_api_requests_total{code="200",mode="segment"}`,
		`leaf_http_api_requests_total{code="500",mode="segment"} 2`,
		`leaf_http_api_requests_total{code="404",mode="none"} 4`,
		`leaf_http_api_requests_total{code="200",mode="snowflake"} 3`,
		`leaf_requests_total{code="404",mode="segment",tag=""} 2`,
	} {
		if !strings.Contains(metrics, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
}

// TestLeafAPIOff: without LEAF_HTTP_LEAF_API nothing of Leaf's API answers.
func TestLeafAPIOff(t *testing.T) {
	s := natstest.Server(t)
	_, logs := startVendor(t, map[string]string{"LEAF_NATS_URL": s.ClientURL(), "LEAF_NATS_STORE_DIR": t.TempDir()})
	if status, _, body := leafGet(t, "GET", httpURL(t, logs)+"api/snowflake/get/x"); status != 404 {
		t.Fatalf("Leaf's API answers while off: %d %s", status, body)
	}
}

// TestTagsImport imports a Leaf deployment's table into each store, next
// to a running vendor, and takes IDs of every tag: each continues at
// Leaf's max_id, above every ID of every segment Leaf took.
func TestTagsImport(t *testing.T) {
	for _, store := range []string{"jetstream-kv", "postgres"} {
		t.Run(store, func(t *testing.T) {
			dsn := ""
			if store == "postgres" {
				dsn = pgtest.DSN(t)
			}
			s := natstest.Server(t)
			nc := natstest.Conn(t, s)
			t.Setenv("LEAF_NATS_URL", s.ClientURL())
			t.Setenv("LEAF_POSTGRES_URL", dsn)
			t.Setenv("LEAF_NATS_STORE_DIR", t.TempDir())
			startVendor(t, nil)
			t.Setenv("LEAF_HTTP_ADDR", "")

			rows := leaftest.Deployment()
			// One tag made here by mistake below Leaf's max_id, one above.
			if code, out := command(t, "tags", "add", "order", "-start", "5"); code != 0 {
				t.Fatal(out)
			}
			if code, out := command(t, "tags", "add", "pay-serial", "-start", "1000000000000"); code != 0 {
				t.Fatal(out)
			}
			dir := t.TempDir()
			tsv, csvFile, bad := filepath.Join(dir, "leaf_alloc.tsv"), filepath.Join(dir, "leaf_alloc.csv"), filepath.Join(dir, "bad.tsv")
			os.WriteFile(tsv, []byte(leaftest.MySQLBatch(rows)), 0o644)
			os.WriteFile(csvFile, []byte(leaftest.CSV(rows)), 0o644)
			os.WriteFile(bad, []byte(leaftest.MySQLBatch(rows)+"bad tag\t1\t1\tx\n"), 0o644)
			_, before := command(t, "tags", "list")

			code, out := command(t, "tags", "import", "-dry-run", tsv)
			t.Logf("vendor tags import -dry-run:\n%s", out)
			if code != 0 || !strings.Contains(out, "dry run: would create 4, raise 1, keep 1; nothing written") {
				t.Fatalf("dry run: exit %d:\n%s", code, out)
			}
			if code, out := command(t, "tags", "import", bad); code != 1 || !strings.Contains(out, "line 8: segment: invalid tag") {
				t.Fatalf("bad file: exit %d:\n%s", code, out)
			}
			if _, after := command(t, "tags", "list"); after != before {
				t.Fatalf("the dry run or the bad file wrote:\n%s\nthen:\n%s", before, after)
			}

			code, out = command(t, "tags", "import", tsv)
			t.Logf("vendor tags import:\n%s", out)
			if code != 0 || !strings.Contains(out, "imported: created 4, raised 1, kept 1") {
				t.Fatalf("import: exit %d:\n%s", code, out)
			}
			_, listed := command(t, "tags", "list")
			for _, f := range []string{tsv, csvFile} {
				if code, out := command(t, "tags", "import", f); code != 0 || !strings.Contains(out, "nothing to change") {
					t.Fatalf("import again from %s: exit %d:\n%s", f, code, out)
				}
			}
			if _, again := command(t, "tags", "list"); again != listed {
				t.Fatalf("a second import changed the store:\n%s\nthen:\n%s", listed, again)
			}
			if !strings.Contains(listed, "优惠券") || !strings.Contains(listed, `编码 C:\codes`) {
				t.Errorf("description not carried over as Leaf had it:\n%s", listed)
			}

			var checked int
			for _, r := range rows {
				first := r.MaxID
				if r.Tag == "pay-serial" {
					first = 1_000_000_000_000
				}
				ids := slices.Concat(segmentIDs(t, nc, r.Tag, 1), segmentIDs(t, nc, r.Tag, 5000), segmentIDs(t, nc, r.Tag, 5000))
				if ids[0] != first || ids[0] <= r.Highest {
					t.Errorf("tag %s: first ID %d, want %d (Leaf's max_id %d, its highest ID %d)", r.Tag, ids[0], first, r.MaxID, r.Highest)
				}
				for i := 1; i < len(ids); i++ {
					if ids[i] <= ids[i-1] {
						t.Fatalf("tag %s: IDs not increasing: %d then %d", r.Tag, ids[i-1], ids[i])
					}
				}
				checked += len(ids)
				t.Logf("tag %-17s Leaf max_id %-8d highest Leaf ID %-8d first ID now %d", r.Tag, r.MaxID, r.Highest, ids[0])
			}
			t.Logf("%s: %d IDs of %d imported tags, every one above every ID Leaf's segments held", store, checked, len(rows))
		})
	}
}
