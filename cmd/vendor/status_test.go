package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/pgtest"
	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/status"
	"github.com/leaf-nats/leaf/vending"
)

// httpURL returns the vendor's status page URL from its log.
func httpURL(t *testing.T, logs *syncBuffer) string {
	t.Helper()
	m := regexp.MustCompile(`url=(http://[0-9.:]+/)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no status page URL in the log:\n%s", logs.String())
	}
	return m[1]
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// servingVendor starts a vendor on s with tag "order" and some traffic.
func servingVendor(t *testing.T, s interface{ ClientURL() string }, nc *nats.Conn) (string, *syncBuffer) {
	t.Helper()
	dir := t.TempDir()
	var out syncBuffer
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	if code := run(context.Background(), []string{"tags", "add", "order", "-step", "100", "-description", "orders <script>"}, &out, &out); code != 0 && !strings.Contains(out.String(), "already exists") {
		t.Fatalf("tags add: %d %s", code, out.String())
	}
	_, logs := startVendor(t, map[string]string{"LEAF_NATS_URL": s.ClientURL(), "LEAF_NATS_STORE_DIR": dir})
	for range 3 {
		if _, err := nc.Request("leaf.segment.order", []byte("20"), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Request("leaf.snowflake", nil, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return httpURL(t, logs), logs
}

func TestHealthReadyMetricsAndStatus(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	url, _ := servingVendor(t, s, nc)
	nc.Request("leaf.segment.nosuch", nil, 5*time.Second)
	nc.Request("leaf.snowflake", []byte("abc"), 5*time.Second)

	// The preload of the next segment runs in the background: wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st status.Status
		_, body := get(t, url+"status.json")
		if json.Unmarshal([]byte(body), &st) == nil && len(st.Segments.Tags) == 1 && st.Segments.Tags[0].NextReady {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("next segment never ready: %s", body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if code, body := get(t, url+"healthz"); code != 200 {
		t.Fatalf("/healthz %d %s", code, body)
	}
	if code, body := get(t, url+"readyz"); code != 200 {
		t.Fatalf("/readyz %d %s", code, body)
	}
	wants := []string{
		`leaf_requests_total{code="200",mode="segment",tag="order"} 3`,
		`leaf_requests_total{code="404",mode="segment",tag=""} 1`,
		`leaf_requests_total{code="400",mode="snowflake",tag=""} 1`,
		`leaf_ids_total{mode="segment",tag="order"} 60`,
		`leaf_ids_total{mode="snowflake",tag=""} 3`,
		`leaf_request_duration_seconds_count{mode="segment"} 4`,
		`leaf_segment_next_ready{tag="order"} 1`,
		`leaf_store_up{store="jetstream-kv"} 1`,
		`leaf_worker_lease_expiry_timestamp_seconds`,
		`leaf_nats_connected 1`,
		`leaf_snowflake_epoch_end_timestamp_seconds 3.487858230209e+09`,
		`leaf_build_info{goversion="go`,
		`leaf_clock_backward_steps_total 0`,
		`leaf_ready 1`,
	}
	// A request is counted just after its reply has gone: read the metrics
	// until they have everything, or for at most five seconds.
	var metrics string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, metrics = get(t, url+"metrics")
		if !slices.ContainsFunc(wants, func(w string) bool { return !strings.Contains(metrics, w) }) || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range wants {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The preload grew the step: the first segment lasted under 15 minutes.
	if m := regexp.MustCompile(`(?m)^leaf_segment_step\{tag="order"\} (\d+)$`).FindStringSubmatch(metrics); m == nil {
		t.Errorf("/metrics lacks leaf_segment_step for order")
	} else if step, _ := strconv.Atoi(m[1]); step < 200 {
		t.Errorf("leaf_segment_step = %d, want at least 200 (doubled)", step)
	}
	var st status.Status
	_, body := get(t, url+"status.json")
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if !st.Ready || !st.Worker.Held || len(st.Segments.Tags) != 1 || len(st.Segments.Rows) != 1 {
		t.Fatalf("status.json: %s", body)
	}
	if tag := st.Segments.Tags[0]; tag.Current.Value != 61 || !tag.NextReady {
		t.Fatalf("tag status %+v, want 60 IDs used and the next segment ready", tag)
	}
}

// browser starts headless Chromium for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := testtool.Path(t, "chromium", "chromium-browser", "google-chrome")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelTimeout)
	return ctx
}

// screenshot saves a PNG of the whole page in $LEAF_TEST_SCREENSHOTS, when
// set, for a person to look at.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("LEAF_TEST_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", file)
}

// traffic asks for IDs until the test ends, so that the page's charts have
// something to draw.
func traffic(t *testing.T, nc *nats.Conn) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			nc.Request("leaf.snowflake", []byte(strconv.Itoa(1+i%5)), time.Second)
			nc.Request("leaf.segment.order", []byte(strconv.Itoa(1+i%7)), time.Second)
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// TestStatusPageInBrowser loads the status page of a running vendor in
// headless Chromium, on a desktop and on a 420 px phone, and reads what a
// person would see: the worker ID, the charts drawing live traffic, the
// tags' buffers (one never asked for), the store's rows and both vendors
// of the cluster, with nothing running off the screen.
func TestStatusPageInBrowser(t *testing.T) {
	ctx := browser(t)
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	var out syncBuffer
	if code := run(context.Background(), []string{"tags", "add", "idle", "-step", "50"}, &out, &out); code != 0 {
		t.Fatalf("tags add: %d %s", code, out.String())
	}
	url, logs := servingVendor(t, s, nc)
	servingVendor(t, s, nc) // a second vendor: the cluster table shows both
	traffic(t, nc)

	for _, width := range []int64{1280, 420} {
		t.Run(strconv.FormatInt(width, 10)+"px", func(t *testing.T) {
			if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 900), chromedp.Navigate(url), chromedp.WaitVisible(`tr[data-tag="order"]`)); err != nil {
				t.Fatalf("browser: %v\nvendor log:\n%s", err, logs.String())
			}
			text := func(sel string) string {
				t.Helper()
				v, err := chromedp.Run(ctx, chromedp.Text(sel))
				if err != nil {
					t.Fatalf("browser: text of %s: %v", sel, err)
				}
				return v
			}
			// The charts draw once a few samples are in: rates need two.
			for _, c := range []struct {
				id     string
				series int
			}{{"ids", 2}, {"latency", 2}, {"fill", 1}} {
				cond := fmt.Sprintf(`(() => { const c = document.getElementById("chart-%s"); return +c.dataset.series >= %d && +c.dataset.points >= 3 * %d; })()`, c.id, c.series, c.series)
				if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
					t.Fatalf("chart %s never drew %d series: %v", c.id, c.series, err)
				}
				// Its lines are on the canvas: pixels of the colour its
				// legend gives the first series.
				drawn, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`(() => {
					const c = document.getElementById("chart-%s"), d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
					const [r, g, b] = getComputedStyle(document.querySelector("#legend-%s i.swatch")).backgroundColor.match(/\d+/g).map(Number);
					let n = 0;
					for (let i = 0; i < d.length; i += 4) if (d[i+3] > 200 && Math.abs(d[i] - r) + Math.abs(d[i+1] - g) + Math.abs(d[i+2] - b) < 60) n++;
					return n; })()`, c.id, c.id)))
				if err != nil || drawn < 20 {
					t.Fatalf("chart %s has %d pixels of its first line: %v", c.id, drawn, err)
				}
			}
			// Latency is on a log scale: a store load's 50 ms leaves the
			// microseconds of every other request well off the axis.
			fracs, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](
				`(() => { const s = scale("latency", [3, 12, 25, 50000]); return [s.frac(3), s.frac(12), s.frac(50000)]; })()`))
			if err != nil || len(fracs) != 3 || fracs[0] >= fracs[1] || fracs[1] < 0.2 || fracs[2] < 0.9 || fracs[2] > 1 {
				t.Fatalf("latency chart heights of 3 µs, 12 µs, 50 ms: %v (want 12 µs at least a fifth up, 50 ms near the top): %v", fracs, err)
			}
			workerID, ready, tagRow, rows := text(`[data-field="worker-id"]`), text(`#ready`), text(`tr[data-tag="order"]`), text(`#rows tbody`)
			id, err := strconv.Atoi(strings.TrimSpace(workerID))
			if err != nil || !strings.Contains(logs.String(), fmt.Sprintf("worker_id=%d", id)) {
				t.Fatalf("page shows worker ID %q, not the vendor's:\n%s", workerID, logs.String())
			}
			if !strings.Contains(ready, "ready") || strings.Contains(ready, "not") {
				t.Fatalf("page says %q, want ready", ready)
			}
			for _, want := range []string{"order", " .. ", "(next ID ", "%", "took"} {
				if !strings.Contains(tagRow, want) {
					t.Fatalf("tag row %q lacks %q", tagRow, want)
				}
			}
			// The next ID is named so, never "next" beside a segment.
			if regexp.MustCompile(`\d\s+next \d`).MatchString(tagRow) {
				t.Fatalf("tag row %q puts a bare next ID beside the segment", tagRow)
			}
			// A tag never asked for has no buffers: it is a row of the
			// store only.
			if !strings.Contains(rows, "idle") {
				t.Fatalf("store rows %q lack the tag never asked for", rows)
			}
			// The description is shown as text, never run as markup.
			if !strings.Contains(rows, "orders <script>") {
				t.Fatalf("store rows %q lack the escaped description", rows)
			}
			if ends := text(`[data-field="snowflake-ends"]`); !strings.Contains(ends, "2080") {
				t.Fatalf("snowflake end shows %q, want a date in 2080 (the default epoch)", ends)
			}
			if layout := text(`[data-field="layout"]`); !strings.Contains(layout, "default (1+41+10+12 bits") {
				t.Fatalf("snowflake layout shows %q, want the default and its bits", layout)
			}
			if reqs := text(`tr[data-series="segment order"]`); !strings.Contains(reqs, "µs") {
				t.Fatalf("request row %q shows no average in µs", reqs)
			}
			if reported := text(`#worker`); regexp.MustCompile(`\d{13}`).MatchString(reported) {
				t.Fatalf("worker section shows raw milliseconds: %q", reported)
			}
			if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll("#cluster tbody tr").length >= 2`)); err != nil {
				t.Fatalf("browser: cluster table never showed two vendors: %v", err)
			}
			if cluster := text(`#cluster tbody`); strings.Count(cluster, "ready") < 2 || !strings.Contains(cluster, "µs") {
				t.Fatalf("cluster table: %q", cluster)
			}
			// Nothing runs off the screen: wide tables scroll in their box.
			overflow, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - document.documentElement.clientWidth`))
			if err != nil || overflow > 0 {
				t.Fatalf("at %d px the page is %d px wider than the screen: %v", width, overflow, err)
			}
			screenshot(t, ctx, fmt.Sprintf("status-%dpx", width))
		})
	}
}

// TestStatusPageEmptyState: with no tag, the page says how to add one.
func TestStatusPageEmptyState(t *testing.T) {
	ctx := browser(t)
	s := natstest.Server(t)
	_, logs := startVendor(t, map[string]string{"LEAF_NATS_URL": s.ClientURL(), "LEAF_NATS_STORE_DIR": t.TempDir()})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(420, 900), chromedp.Navigate(httpURL(t, logs)), chromedp.WaitVisible(`#tags-empty`)); err != nil {
		t.Fatalf("browser: %v", err)
	}
	empty, err := chromedp.Run(ctx, chromedp.Text(`#tags-empty`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(empty, "vendor tags add <tag>") {
		t.Fatalf("empty state says %q", empty)
	}
	screenshot(t, ctx, "status-empty-420px")
}

// TestSlowPathErrorsAgree checks that micro stats, the status page and
// /metrics count the same errors when they are answered after waiting for
// the store: 404s for unknown tags and 503s with the store down.
func TestSlowPathErrorsAgree(t *testing.T) {
	pg := pgtest.StartServer(t)
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	t.Setenv("LEAF_NATS_URL", s.ClientURL())
	t.Setenv("LEAF_POSTGRES_URL", pg.DSN())
	var out syncBuffer
	if code := run(context.Background(), []string{"tags", "add", "order", "-step", "10"}, &out, &out); code != 0 {
		t.Fatalf("tags add: %d %s", code, out.String())
	}
	_, logs := startVendor(t, map[string]string{"LEAF_NATS_STORE_DIR": t.TempDir()})
	url := httpURL(t, logs)
	codes := map[string]int{}
	ask := func(subject, body string) {
		t.Helper()
		msg, err := nc.Request(subject, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		codes[cmp.Or(msg.Header.Get(micro.ErrorCodeHeader), "200")]++
	}
	for i := range 3 {
		ask(fmt.Sprintf("leaf.segment.nosuch%d", i), "")
	}
	pg.Stop()
	for range 20 {
		ask("leaf.segment.order", "10") // empties the buffers, then 503s
	}
	if codes["404"] != 3 || codes["503"] == 0 {
		t.Fatalf("replies by code %v, want three 404s and some 503s", codes)
	}
	wantErrors := codes["404"] + codes["503"]

	// Every count hears of a reply just after the reply reaches the
	// client, and the cluster table waits a moment for the vendors' stats:
	// read them all until they agree, or for five seconds.
	type counts struct{ micro, metrics, page, cluster, clusterRequests int }
	read := func() (c counts) {
		var st micro.Stats
		msg, err := nc.Request("$SRV.STATS.leaf", nil, 5*time.Second)
		if err != nil || json.Unmarshal(msg.Data, &st) != nil {
			t.Fatalf("micro stats: %v", err)
		}
		for _, ep := range st.Endpoints {
			c.micro += ep.NumErrors
		}
		_, metrics := get(t, url+"metrics")
		for _, m := range regexp.MustCompile(`(?m)^leaf_requests_total\{code="(\d+)",[^}]*\} (\d+)$`).FindAllStringSubmatch(metrics, -1) {
			if m[1] != "200" {
				n, _ := strconv.Atoi(m[2])
				c.metrics += n
			}
		}
		var page status.Status
		_, body := get(t, url+"status.json")
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Requests {
			if r.Code != vending.CodeOK {
				c.page += int(r.Requests)
			}
		}
		var cluster []status.ClusterEntry
		_, body = get(t, url+"cluster.json")
		if err := json.Unmarshal([]byte(body), &cluster); err != nil {
			t.Fatalf("cluster.json: %v %s", err, body)
		}
		if len(cluster) == 1 {
			c.cluster, c.clusterRequests = cluster[0].Errors, cluster[0].Requests
		} else {
			c.cluster = -1 // the table does not list the one vendor, yet
		}
		return c
	}
	// micro counts a request when its handler returns, so it misses the
	// errors of those answered after waiting (all of these, but for 503s
	// answered at once); the cluster table reads the vendors' own counts.
	agree := func(c counts) bool {
		return c.metrics == wantErrors && c.page == wantErrors && c.cluster == wantErrors && c.clusterRequests == 23
	}
	got := read()
	for deadline := time.Now().Add(5 * time.Second); !agree(got) && time.Now().Before(deadline); got = read() {
		time.Sleep(20 * time.Millisecond)
	}
	if got.micro > wantErrors || got.metrics != wantErrors || got.page != wantErrors || got.cluster != wantErrors {
		t.Fatalf("errors: clients saw %d, micro stats %d (at most that), /metrics %d, status page %d, cluster table %d (-1: not one vendor listed)",
			wantErrors, got.micro, got.metrics, got.page, got.cluster)
	}
	if got.clusterRequests != 23 {
		t.Errorf("cluster table counts %d requests, want 23 (none twice)", got.clusterRequests)
	}
}
