package deploy

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
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

func TestComposeShape(t *testing.T) {
	c := loadCompose(t)
	if n := len(c.byImage("nats:")); n != 3 {
		t.Errorf("%d NATS services, want a cluster of 3", n)
	}
	if n := len(c.byImage("postgres:")); n != 1 {
		t.Errorf("%d Postgres services, want 1", n)
	}
	if n := len(c.byImage("")); n < 3 {
		t.Errorf("%d vendors built from the Dockerfile, want at least 3", n)
	}
	if n := len(c.byImage("prom/prometheus")); n != 1 {
		t.Errorf("%d Prometheus services, want 1", n)
	}
	for name, s := range c.Services {
		if s.Image == "" && s.Build.Context == "" {
			t.Errorf("service %s has neither image nor build", name)
		}
		if s.Healthcheck == nil && !strings.HasPrefix(s.Image, "prom/") {
			t.Errorf("service %s has no healthcheck", name)
		}
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

// configVars returns the LEAF_* variables of cmd/vendor's Config, read from
// the envconfig tags in its source.
func configVars(t *testing.T) map[string]bool {
	t.Helper()
	file := filepath.Join(root, "cmd", "vendor", "config.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Config" {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			if field.Tag == nil {
				continue
			}
			tag, _ := strconv.Unquote(field.Tag.Value)
			if name := reflect.StructTag(tag).Get("envconfig"); name != "" {
				vars["LEAF_"+name] = true
			}
		}
		return false
	})
	if len(vars) == 0 {
		t.Fatalf("no envconfig tags found in %s's Config", file)
	}
	return vars
}

func TestComposeVendors(t *testing.T) {
	c := loadCompose(t)
	known := configVars(t)
	natsNodes := c.byImage("nats:")
	pg := c.Services[c.byImage("postgres:")[0]]
	vendors := c.byImage("")
	for _, name := range vendors {
		s := c.Services[name]
		env := s.Environment
		for k := range env {
			if strings.HasPrefix(k, "LEAF_") && !known[k] {
				t.Errorf("%s sets %s, which the vendor does not read (cmd/vendor/config.go)", name, k)
			}
		}
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

func TestPrometheusScrapesEveryVendor(t *testing.T) {
	c := loadCompose(t)
	prom := c.Services[c.byImage("prom/prometheus")[0]]
	mounted := false
	for _, v := range prom.Volumes {
		if strings.HasPrefix(v, "./docker/prometheus.yml:") {
			mounted = true
		}
	}
	if !mounted {
		t.Fatal("the prometheus service does not mount ./docker/prometheus.yml")
	}
	if !slices.ContainsFunc(prom.Ports, func(s string) bool { p, err := parsePort(s); return err == nil && p.host == 9090 }) {
		t.Error("Prometheus is not published on port 9090")
	}
	data, err := os.ReadFile(filepath.Join(root, "docker", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("docker/prometheus.yml: %v", err)
	}
	var targets []string
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("metrics_path %q: the vendor serves /metrics", sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	var want []string
	for _, name := range c.byImage("") {
		_, p, _ := net.SplitHostPort(c.Services[name].Environment["LEAF_HTTP_ADDR"])
		want = append(want, net.JoinHostPort(name, p))
	}
	slices.Sort(targets)
	if !slices.Equal(targets, want) {
		t.Errorf("prometheus targets %v, want each vendor's LEAF_HTTP_ADDR %v", targets, want)
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

// dockerfile is the Dockerfile split into instructions (continuations joined).
func dockerfile(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if rest, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(trimmed)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out
}

func TestDockerfile(t *testing.T) {
	ins := dockerfile(t)
	var froms, users []string
	var build string
	for _, in := range ins {
		switch op, _, _ := strings.Cut(in, " "); strings.ToUpper(op) {
		case "FROM":
			froms = append(froms, in)
			users = users[:0] // USER applies per stage
		case "USER":
			users = append(users, strings.Fields(in)[1])
		case "RUN":
			if strings.Contains(in, "go build") {
				build = in
			}
		}
	}
	if len(froms) < 2 {
		t.Fatalf("want a multi-stage build, got %v", froms)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if goVer == nil || !strings.HasPrefix(froms[0], "FROM golang:"+string(goVer[1])) {
		t.Errorf("build stage %q: want golang:%s as go.mod", froms[0], goVer[1])
	}
	if len(users) == 0 || slices.Contains([]string{"root", "0", "root:root", "0:0"}, users[len(users)-1]) {
		t.Errorf("final stage runs as %v: want a non-root USER", users)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/vendor"} {
		if !strings.Contains(build, want) {
			t.Errorf("go build step lacks %s: %s", want, build)
		}
	}
	// Every package built exists.
	for _, f := range strings.Fields(build) {
		if !strings.HasPrefix(f, "./") {
			continue
		}
		matches, _ := filepath.Glob(filepath.Join(root, f, "*.go"))
		if len(matches) == 0 {
			t.Errorf("the Dockerfile builds %s, which has no Go files", f)
		}
	}
	// The vendors' health check runs a binary the image has.
	c := loadCompose(t)
	for _, name := range c.byImage("") {
		hc := c.Services[name].Healthcheck
		if hc == nil || len(hc.Test) < 2 {
			continue
		}
		bin := path.Base(hc.Test[1])
		if !strings.Contains(build, "./docker/"+bin) && !strings.Contains(build, "./cmd/"+bin) {
			t.Errorf("%s's healthcheck runs %s, which the Dockerfile does not build", name, hc.Test[1])
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
		"./cmd/vendor", "./cmd/loadgen", "./docker/healthcheck"}
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
	for _, rel := range []string{".git", "vendor", "leaf-data"} {
		if ignored(rel) == "" {
			t.Errorf(".dockerignore does not leave out %s", rel)
		}
	}
}
