package deploy

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"
)

// root is the repository root, relative to this package.
const root = ".."

// compose is the part of the Compose file format this project uses.
type compose struct {
	Services map[string]service  `yaml:"services"`
	Volumes  map[string]struct{} `yaml:"volumes"`
}

type service struct {
	Image       string         `yaml:"image"`
	Build       build          `yaml:"build"`
	Environment stringMap      `yaml:"environment"`
	Ports       []string       `yaml:"ports"`
	Volumes     []string       `yaml:"volumes"`
	DependsOn   stringSet      `yaml:"depends_on"`
	Healthcheck *healthcheck   `yaml:"healthcheck"`
	Command     []string       `yaml:"command"`
	Extra       map[string]any `yaml:",inline"`
}

type healthcheck struct {
	Test []string `yaml:"test"`
}

// build is `build: dir` or `build: {context: dir, dockerfile: file}`.
type build struct{ Context, Dockerfile string }

func (b *build) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		b.Context = n.Value
		return nil
	}
	var long struct{ Context, Dockerfile string }
	err := n.Decode(&long)
	*b = build(long)
	return err
}

// stringMap is `KEY: value` or `- KEY=value`.
type stringMap map[string]string

func (m *stringMap) UnmarshalYAML(n *yaml.Node) error {
	*m = stringMap{}
	if n.Kind == yaml.SequenceNode {
		var list []string
		if err := n.Decode(&list); err != nil {
			return err
		}
		for _, kv := range list {
			k, v, _ := strings.Cut(kv, "=")
			(*m)[k] = v
		}
		return nil
	}
	return n.Decode((*map[string]string)(m))
}

// stringSet is `[a, b]` or `{a: {...}, b: {...}}` (depends_on).
type stringSet []string

func (s *stringSet) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		return n.Decode((*[]string)(s))
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return err
	}
	for k := range m {
		*s = append(*s, k)
	}
	slices.Sort(*s)
	return nil
}

func loadCompose(t *testing.T) compose {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return c
}

// byImage returns the names of the services whose image starts with prefix
// (or that are built, for prefix ""), sorted.
func (c compose) byImage(prefix string) []string {
	var names []string
	for name, s := range c.Services {
		if prefix == "" && s.Build.Context != "" || prefix != "" && strings.HasPrefix(s.Image, prefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// composeCommand returns the command that runs Docker Compose: the docker
// client's plugin, else the standalone docker-compose (scripts/test.sh
// installs Debian's when neither is there). Neither needs an engine to
// validate a file.
func composeCommand(t *testing.T) []string {
	t.Helper()
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no docker compose nor docker-compose: run scripts/test.sh, which installs docker-compose")
	}
	t.Skip("no docker compose nor docker-compose (scripts/test.sh installs it); TestCompose* parse compose.yaml instead")
	return nil
}

// TestDockerComposeConfig lets Docker Compose itself validate compose.yaml.
func TestDockerComposeConfig(t *testing.T) {
	cmd := composeCommand(t)
	args := append(cmd[1:], "--project-directory", root, "-f", filepath.Join(root, "compose.yaml"), "config", "--quiet")
	out, err := exec.Command(cmd[0], args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s config: %v\n%s", strings.Join(cmd, " "), err, out)
	}
}

func TestComposeReferencesExist(t *testing.T) {
	c := loadCompose(t)
	used := map[string]bool{}
	for name, s := range c.Services {
		if ctx := s.Build.Context; ctx != "" {
			df := s.Build.Dockerfile
			if df == "" {
				df = "Dockerfile"
			}
			if _, err := os.Stat(filepath.Join(root, ctx, df)); err != nil {
				t.Errorf("service %s builds %s: %v", name, path.Join(ctx, df), err)
			}
		}
		for _, dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("service %s depends on %q, which is not a service", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, ok := strings.Cut(v, ":")
			if !ok {
				continue // anonymous volume
			}
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("service %s mounts %s: %v", name, src, err)
				}
				continue
			}
			used[src] = true
			if _, ok := c.Volumes[src]; !ok {
				t.Errorf("service %s uses volume %q, not declared under volumes:", name, src)
			}
		}
	}
	for v := range c.Volumes {
		if !used[v] {
			t.Errorf("volume %q is declared but no service uses it", v)
		}
	}
}

// port is one published port: host address and port, container port.
type port struct {
	hostIP          string
	host, container int
}

func parsePort(s string) (port, error) {
	parts := strings.Split(strings.TrimSuffix(strings.TrimSuffix(s, "/tcp"), "/udp"), ":")
	var p port
	var err error
	switch len(parts) {
	case 2:
		parts = append([]string{""}, parts...)
	case 3:
	default:
		return p, fmt.Errorf("port %q: want [ip:]host:container", s)
	}
	p.hostIP = parts[0]
	if p.host, err = strconv.Atoi(parts[1]); err != nil {
		return p, fmt.Errorf("port %q: %w", s, err)
	}
	if p.container, err = strconv.Atoi(parts[2]); err != nil {
		return p, fmt.Errorf("port %q: %w", s, err)
	}
	return p, nil
}

func TestComposePortsDoNotCollide(t *testing.T) {
	c := loadCompose(t)
	taken := map[int]string{}
	for name, s := range c.Services {
		for _, ps := range s.Ports {
			p, err := parsePort(ps)
			if err != nil {
				t.Errorf("service %s: %v", name, err)
				continue
			}
			// 127.0.0.1:9090 and 0.0.0.0:9090 collide too: key on the port.
			if other, ok := taken[p.host]; ok {
				t.Errorf("host port %d published by both %s and %s", p.host, other, name)
			}
			taken[p.host] = name
		}
	}
}

func TestComposeVendors(t *testing.T) {
	c := loadCompose(t)
	natsNodes := c.byImage("nats:")
	pg := c.Services[c.byImage("postgres:")[0]]
	vendors := c.byImage("")
	for _, name := range vendors {
		s := c.Services[name]
		env := s.Environment
		var hosts []string
		for _, u := range strings.Split(env["LEAF_NATS_URL"], ",") {
			pu, err := url.Parse(strings.TrimSpace(u))
			if err != nil || pu.Port() != "4222" {
				t.Errorf("%s: LEAF_NATS_URL entry %q: want nats://<service>:4222", name, u)
				continue
			}
			hosts = append(hosts, pu.Hostname())
		}
		slices.Sort(hosts)
		if !slices.Equal(hosts, natsNodes) {
			t.Errorf("%s: LEAF_NATS_URL names %v, want every NATS node %v", name, hosts, natsNodes)
		}
		if r := env["LEAF_KV_REPLICAS"]; r != strconv.Itoa(len(natsNodes)) {
			t.Errorf("%s: LEAF_KV_REPLICAS=%q, want %d (one per NATS node)", name, r, len(natsNodes))
		}
		pu, err := url.Parse(env["LEAF_POSTGRES_URL"])
		if err != nil {
			t.Errorf("%s: LEAF_POSTGRES_URL: %v", name, err)
		} else {
			pw, _ := pu.User.Password()
			got := []string{pu.Hostname(), pu.User.Username(), pw, strings.TrimPrefix(pu.Path, "/")}
			want := []string{c.byImage("postgres:")[0], pg.Environment["POSTGRES_USER"], pg.Environment["POSTGRES_PASSWORD"], pg.Environment["POSTGRES_DB"]}
			if !slices.Equal(got, want) {
				t.Errorf("%s: LEAF_POSTGRES_URL host, user, password, database %q, want %q", name, got, want)
			}
		}
		host, httpPort, err := net.SplitHostPort(env["LEAF_HTTP_ADDR"])
		if err != nil || host != "0.0.0.0" {
			t.Errorf("%s: LEAF_HTTP_ADDR=%q, want 0.0.0.0:<port> to be reachable", name, env["LEAF_HTTP_ADDR"])
		}
		published := false
		for _, ps := range s.Ports {
			if p, err := parsePort(ps); err == nil && strconv.Itoa(p.container) == httpPort {
				published = true
			}
		}
		if !published {
			t.Errorf("%s: LEAF_HTTP_ADDR port %s is not published", name, httpPort)
		}
		for _, dep := range append(slices.Clone(natsNodes), c.byImage("postgres:")...) {
			if !slices.Contains(s.DependsOn, dep) {
				t.Errorf("%s does not depend on %s", name, dep)
			}
		}
	}
}

// prometheusConfig is the part of docker/prometheus/prometheus.yml the
// tests read.
type prometheusConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// mountOf returns where service s mounts the file or folder src, or "".
func mountOf(s service, src string) string {
	for _, v := range s.Volumes {
		if from, to, ok := strings.Cut(v, ":"); ok && from == src {
			to, _, _ = strings.Cut(to, ":")
			return to
		}
	}
	return ""
}

func TestPrometheusScrapesEveryVendor(t *testing.T) {
	c := loadCompose(t)
	prom := c.Services[c.byImage("prom/prometheus")[0]]
	if mountOf(prom, "./docker/prometheus/prometheus.yml") != "/etc/prometheus/prometheus.yml" {
		t.Fatal("the prometheus service does not mount ./docker/prometheus/prometheus.yml as its configuration")
	}
	if !slices.ContainsFunc(prom.Ports, func(s string) bool { p, err := parsePort(s); return err == nil && p.host == 9090 }) {
		t.Error("Prometheus is not published on port 9090")
	}
	data, err := os.ReadFile(filepath.Join(root, "docker", "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg prometheusConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("docker/prometheus/prometheus.yml: %v", err)
	}
	targets := map[string][]string{}
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("metrics_path %q: the vendor and the exporter serve /metrics", sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			targets[sc.JobName] = append(targets[sc.JobName], st.Targets...)
		}
	}
	var want []string
	for _, name := range c.byImage("") {
		_, p, _ := net.SplitHostPort(c.Services[name].Environment["LEAF_HTTP_ADDR"])
		want = append(want, net.JoinHostPort(name, p))
	}
	// The alerting rules name the job.
	slices.Sort(targets["leaf-vendor"])
	if !slices.Equal(targets["leaf-vendor"], want) {
		t.Errorf("job leaf-vendor targets %v, want each vendor's LEAF_HTTP_ADDR %v", targets["leaf-vendor"], want)
	}

	// One exporter per NATS node, each scraped.
	exporters := c.byImage("natsio/prometheus-nats-exporter")
	var exported, wantExporters []string
	for _, name := range exporters {
		s := c.Services[name]
		u, err := url.Parse(s.Command[len(s.Command)-1])
		if err != nil || u.Port() != "8222" {
			t.Errorf("%s: last argument %q: want the monitoring URL http://<nats node>:8222", name, s.Command[len(s.Command)-1])
			continue
		}
		exported = append(exported, u.Hostname())
		wantExporters = append(wantExporters, name+":7777")
	}
	slices.Sort(exported)
	if nodes := c.byImage("nats:"); !slices.Equal(exported, nodes) {
		t.Errorf("the NATS exporters read %v, want every NATS node %v", exported, nodes)
	}
	slices.Sort(targets["nats"])
	if !slices.Equal(targets["nats"], wantExporters) {
		t.Errorf("job nats targets %v, want every exporter %v", targets["nats"], wantExporters)
	}

	// The rules Prometheus loads are the ones the tests check.
	at := mountOf(prom, "./docker/prometheus/leaf-rules.yml")
	if at == "" || !slices.Contains(cfg.RuleFiles, at) {
		t.Errorf("Prometheus loads rules %v; want ./docker/prometheus/leaf-rules.yml mounted (at %q) and listed", cfg.RuleFiles, at)
	}
}

func TestNATSClusterConfig(t *testing.T) {
	c := loadCompose(t)
	nodes := c.byImage("nats:")
	for _, name := range nodes {
		s := c.Services[name]
		if s.Environment["NATS_SERVER_NAME"] != name {
			t.Errorf("%s: NATS_SERVER_NAME=%q, want the service name", name, s.Environment["NATS_SERVER_NAME"])
		}
		if !slices.ContainsFunc(s.Volumes, func(v string) bool { return strings.HasPrefix(v, "./docker/nats.conf:") }) {
			t.Errorf("%s does not mount ./docker/nats.conf", name)
		}
		if !slices.ContainsFunc(s.Ports, func(v string) bool { p, err := parsePort(v); return err == nil && p.container == 4222 }) {
			t.Errorf("%s does not publish its client port 4222", name)
		}
	}
	t.Setenv("NATS_SERVER_NAME", nodes[0])
	o, err := server.ProcessConfigFile(filepath.Join(root, "docker", "nats.conf"))
	if err != nil {
		t.Fatalf("docker/nats.conf: %v", err)
	}
	if !o.JetStream || o.StoreDir == "" {
		t.Error("docker/nats.conf: JetStream is not enabled with a store_dir")
	}
	if !o.SyncAlways {
		t.Error("docker/nats.conf: JetStream syncs lazily; set sync_interval: always (docs/operations.md)")
	}
	if o.Port != 4222 || o.HTTPPort != 8222 {
		t.Errorf("docker/nats.conf: client port %d, monitoring %d; the compose file assumes 4222 and 8222", o.Port, o.HTTPPort)
	}
	var routes []string
	for _, r := range o.Routes {
		if r.Port() != strconv.Itoa(o.Cluster.Port) {
			t.Errorf("route %s: the cluster listens on %d", r, o.Cluster.Port)
		}
		routes = append(routes, r.Hostname())
	}
	slices.Sort(routes)
	if !slices.Equal(routes, nodes) {
		t.Errorf("docker/nats.conf routes %v, want the NATS services %v", routes, nodes)
	}
	// The image runs the server the tests run.
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`github.com/nats-io/nats-server/v2 v(\d+\.\d+)\.`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod does not require github.com/nats-io/nats-server/v2")
	}
	for _, name := range nodes {
		if img := c.Services[name].Image; !strings.HasPrefix(img, "nats:"+string(m[1])) {
			t.Errorf("%s runs %s; go.mod has nats-server %s: keep them in step", name, img, m[1])
		}
	}
}

// TestDockerignoreKeepsTheBuild checks that .dockerignore leaves in every
// file the image's packages are built from.
func TestDockerignoreKeepsTheBuild(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.TrimPrefix(line, "/"))
		}
	}
	ignored := func(rel string) string {
		for p := rel; p != "."; p = path.Dir(p) {
			for _, pat := range patterns {
				if ok, _ := path.Match(pat, p); ok {
					return pat
				}
				if rest, ok := strings.CutPrefix(pat, "**/"); ok {
					if ok, _ := path.Match(rest, path.Base(p)); ok {
						return pat
					}
				}
			}
		}
		return ""
	}
	args := []string{"list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}",
		"./cmd/vendor", "./cmd/loadgen"}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	need := []string{"go.mod", "go.sum"}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(abs, dir)
		if err != nil {
			t.Fatal(err)
		}
		need = append(need, filepath.ToSlash(rel))
	}
	for _, rel := range need {
		if pat := ignored(rel); pat != "" {
			t.Errorf(".dockerignore pattern %q leaves %s out of the build", pat, rel)
		}
	}
	for _, rel := range []string{".git", "vendor", "leaf-data", "leaf-data.record"} {
		if ignored(rel) == "" {
			t.Errorf(".dockerignore does not leave out %s", rel)
		}
	}
}
