package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.yaml.in/yaml/v3"

	"github.com/leaf-nats/leaf/internal/testtool"
)

// TestAlertRules checks the rules file and runs its unit tests, and checks
// the syntax of the Prometheus configuration that loads it.
func TestAlertRules(t *testing.T) {
	tool := testtool.Path(t, "promtool")
	dir := filepath.Join(root, "docker", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "leaf-rules.yml"},
		{"test", "rules", "leaf-rules.test.yml"},
		{"check", "config", "--syntax-only", "prometheus.yml"},
	} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		}
	}
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title      string `json:"title"`
	Type       string `json:"type"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docker", "grafana", "dashboards", "leaf-nats.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("leaf-nats.json: %v", err)
	}
	return d
}

// promQLNames returns the metric names a PromQL expression reads: what is
// left once strings, label matchers, ranges, offsets' durations and label
// lists are taken out, functions and keywords aside.
func promQLNames(expr string) []string {
	for _, re := range []string{`"[^"]*"`, `\{[^}]*\}`, `\[[^\]]*\]`, `\boffset\s+-?[0-9][0-9a-z]*`, `\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`} {
		expr = regexp.MustCompile(re).ReplaceAllString(expr, " ")
	}
	keywords := map[string]bool{"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true}
	var names []string
	for _, m := range regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?`).FindAllStringSubmatch(expr, -1) {
		if m[2] == "" && !keywords[strings.ToLower(m[1])] && !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	return names
}

func TestPromQLNames(t *testing.T) {
	got := promQLNames(`histogram_quantile(0.99, sum by (mode, le) (rate(leaf_request_duration_seconds_bucket{code!="200"}[5m]))) / on (job) leaf_ready == bool 1` +
		` or leaf_ready unless leaf_ready offset 10m`)
	if want := []string{"leaf_request_duration_seconds_bucket", "leaf_ready"}; !slices.Equal(got, want) {
		t.Fatalf("promQLNames = %v, want %v", got, want)
	}
}

// TestGrafanaProvisioning checks that compose.yaml's Grafana gets the data
// source the dashboard names, and the dashboard.
func TestGrafanaProvisioning(t *testing.T) {
	c := loadCompose(t)
	names := c.byImage("grafana/grafana")
	if len(names) != 1 {
		t.Fatalf("compose.yaml has Grafana services %v, want one of the official image", names)
	}
	g := c.Services[names[0]]
	if mountOf(g, "./docker/grafana/provisioning") != "/etc/grafana/provisioning" {
		t.Error("Grafana does not mount ./docker/grafana/provisioning at /etc/grafana/provisioning")
	}
	var provider struct {
		Providers []struct {
			Options struct{ Path string } `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(root, "docker", "grafana", "provisioning", "dashboards", "leaf-nats.yml"), &provider)
	if len(provider.Providers) != 1 || mountOf(g, "./docker/grafana/dashboards") != provider.Providers[0].Options.Path {
		t.Errorf("the dashboard provider reads %+v; compose mounts ./docker/grafana/dashboards at %q", provider.Providers, mountOf(g, "./docker/grafana/dashboards"))
	}
	var sources struct {
		Datasources []struct{ UID, Type, URL string } `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(root, "docker", "grafana", "provisioning", "datasources", "prometheus.yml"), &sources)
	if len(sources.Datasources) != 1 || sources.Datasources[0].URL != "http://"+c.byImage("prom/prometheus")[0]+":9090" {
		t.Fatalf("data sources %+v, want compose's Prometheus", sources.Datasources)
	}
	d := loadDashboard(t)
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" && p.Datasource.UID != sources.Datasources[0].UID {
				t.Errorf("panel %q uses data source %q, not the provisioned %q", p.Title, p.Datasource.UID, sources.Datasources[0].UID)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// TestDashboardAndRulesMetricsExist runs a real vendor (the binary, with its
// embedded NATS server), asks it for IDs, and checks that every metric the
// dashboard's queries and the alerting rules read is on its /metrics.
func TestDashboardAndRulesMetricsExist(t *testing.T) {
	metrics := realVendorMetrics(t)
	exposed := map[string]bool{"up": true} // Prometheus's own, per target
	for _, line := range strings.Split(metrics, "\n") {
		if name, _, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
			name, _, _ = strings.Cut(name, "{")
			exposed[name] = true
		}
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Record, Alert, Expr string } `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, filepath.Join(root, "docker", "prometheus", "leaf-rules.yml"), &rules)
	recorded := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	check := func(where, expr string) {
		t.Helper()
		for _, name := range promQLNames(expr) {
			if !exposed[name] && !recorded[name] {
				t.Errorf("%s reads %s, which the vendor does not expose: %s", where, name, expr)
			}
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			check("rule "+r.Record+r.Alert, r.Expr)
		}
	}
	var walk func([]panel)
	n := 0
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				n++
				check(fmt.Sprintf("dashboard panel %q", p.Title), tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(loadDashboard(t).Panels)
	if n < 10 {
		t.Errorf("the dashboard has %d queries", n)
	}
}

// realVendorMetrics builds and runs the vendor with an embedded NATS
// server, gives it a tag and some requests, and returns its /metrics.
func realVendorMetrics(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "vendor")
	build := exec.Command("go", "build", "-o", bin, "./cmd/vendor")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	natsAddr, httpAddr := freeAddr(t), freeAddr(t)
	env := append(os.Environ(), "LEAF_NATS_URL=", "LEAF_POSTGRES_URL=", "LEAF_NATS_LISTEN="+natsAddr,
		"LEAF_NATS_STORE_DIR="+filepath.Join(dir, "data"), "LEAF_HTTP_ADDR="+httpAddr)
	ctx, cancel := context.WithCancel(context.Background())
	vendor := exec.CommandContext(ctx, bin)
	vendor.Env = env
	var logs strings.Builder
	vendor.Stdout, vendor.Stderr = &logs, &logs
	if err := vendor.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		vendor.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get("http://" + httpAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("vendor not ready:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	tags := exec.Command(bin, "tags", "add", "order", "-step", "100")
	tags.Env = append(env, "LEAF_NATS_URL=nats://"+natsAddr, "LEAF_HTTP_ADDR=")
	if out, err := tags.CombinedOutput(); err != nil {
		t.Fatalf("vendor tags add: %v\n%s", err, out)
	}
	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, subj := range []string{"leaf.snowflake", "leaf.segment.order", "leaf.segment.nosuch"} {
		if _, err := nc.Request(subj, []byte("3"), 5*time.Second); err != nil {
			t.Fatalf("%s: %v", subj, err)
		}
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
