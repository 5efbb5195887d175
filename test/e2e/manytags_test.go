package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/internal/pgtest"
	"github.com/leaf-nats/leaf/status"
)

// TestManyTags is issue 23's tenant-per-tag run: a Postgres store with many
// tags (100,000 in a soak, 5,000 otherwise), two vendors, a tenth of the
// tags asked for once each. Every request is answered; each vendor stays
// under 100 MB of resident memory; micro stats and info, /cluster.json,
// /metrics and /status.json all answer, with their size bounded whatever
// the number of tags. It reports the memory per tag, known and in use.
func TestManyTags(t *testing.T) {
	tags, used := 5_000, 500
	if soak() {
		tags, used = 100_000, 20_000
	}
	pg := pgtest.StartServer(t)
	ns := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": ns.url(), "LEAF_POSTGRES_URL": pg.DSN()}
	vendorCommand(t, env, "tags", "add", "t000000", "-step", "1000") // the table
	insertTags(t, pg.DSN(), tags)
	vendors := startVendors(t, "m", 2, env)
	nc := ns.conn(t)
	eventually(t, 60*time.Second, "both vendors to list every tag", func() bool {
		return vendorMetric(vendors, "leaf_segment_tags") >= float64(2*(tags+1))
	})
	before := residentMB(t, vendors)

	start := time.Now()
	failed := askTags(t, nc, used)
	asked := time.Since(start)
	after := residentMB(t, vendors)

	sizes, instances, statsErrs := statsReplies(t, nc)
	infos := askAll(t, nc, "$SRV.INFO."+"leaf", 2*time.Second)
	table := clusterTable(vendors)
	series, metricsBytes := scrape(t, vendors[0])
	statusBytes, statusTags := statusPage(t, vendors[0])
	perTag := func(mb float64, n int) string { return fmt.Sprintf("%.2f KB", mb*1024/float64(n)) }
	report(t, "many tags: %d tags, %d asked once each in %v (%d failed); RSS MB per vendor %v known, %v after (%s a known tag, %s more a tag in use); micro stats replies "+
		"%d (bytes %v, errors %q), info replies %d; /cluster.json lists %v; /metrics %d series, %d KB; /status.json %d KB listing %d of %d tags",
		tags+1, used, asked.Round(100*time.Millisecond), failed, before, after, perTag(before[0], tags), perTag(after[0]-before[0], used/2),
		len(sizes), sizes, statsErrs, len(infos), tableSizes(table), series, metricsBytes/1024, statusBytes/1024, statusTags, tags+1)
	if failed > 0 {
		t.Errorf("%d of %d requests failed", failed, used)
	}
	for i, mb := range after {
		if mb >= 100 {
			t.Errorf("vendor %s: %.0f MB resident with %d tags, %d in use; want under 100 MB", vendors[i].name, mb, tags, used)
		}
	}
	if len(sizes) != 2 || len(instances) != 2 || len(infos) != 2 {
		t.Errorf("micro stats: %d replies naming %d vendors (errors %q), micro info: %d replies; want 2 each", len(sizes), len(instances), statsErrs, len(infos))
	}
	for i, list := range table {
		if len(list) != 2 {
			t.Errorf("vendor %s's /cluster.json lists %q, want both vendors", vendors[i].name, list)
		}
	}
	if series > 20_000 {
		t.Errorf("/metrics has %d series with %d tags: a scrape must stay small", series, tags)
	}
	if statusTags > status.PageTags {
		t.Errorf("/status.json lists %d tags, more than the %d it shows", statusTags, status.PageTags)
	}
}

// insertTags adds tags t000001.. with step 1000 straight into leaf_alloc:
// `vendor tags import` checks each row, which takes minutes for 100,000.
func insertTags(t testing.TB, dsn string, n int) {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.Exec(`INSERT INTO leaf_alloc (biz_tag, max_id, step, description)
		SELECT 't' || lpad(g::text, 6, '0'), 1, 1000, 'many tags' FROM generate_series(1, $1) g`, n)
	if err != nil {
		t.Fatal(err)
	}
}

// askTags asks tags t000001..t<used> for one ID each, from 16 clients, and
// returns how many requests failed.
func askTags(t testing.TB, nc *nats.Conn, used int) int {
	t.Helper()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(used) {
					return
				}
				m, err := nc.Request(fmt.Sprintf("leaf.segment.t%06d", i), []byte("1"), 10*time.Second)
				if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "" {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(failed.Load())
}

// residentMB reads each vendor's resident memory (VmRSS), in MB.
func residentMB(t testing.TB, vendors []*vendor) []float64 {
	t.Helper()
	out := make([]float64, len(vendors))
	for i, v := range vendors {
		v.mu.Lock()
		pid := v.cmd.Process.Pid
		v.mu.Unlock()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
				out[i] = float64(int(kb/1024*10)) / 10
			}
		}
	}
	return out
}

// scrape counts the series of v's /metrics and its size in bytes.
func scrape(t testing.TB, v *vendor) (series, size int) {
	t.Helper()
	_, body, err := fetch("http://"+v.httpAddr()+"/metrics", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(body, "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			series++
		}
	}
	return series, len(body)
}

// statusPage reads v's /status.json: its size and how many tags it lists.
func statusPage(t testing.TB, v *vendor) (size, tags int) {
	t.Helper()
	_, body, err := fetch("http://"+v.httpAddr()+"/status.json", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var s status.Status
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("/status.json: %v", err)
	}
	return len(body), len(s.Segments.Tags)
}
