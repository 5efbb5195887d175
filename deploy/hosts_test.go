package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leaf-nats/leaf/internal/testtool"
)

// vendorVariables returns the variables the vendor reads, as vendor -h
// lists them: the configuration the deployment files must match.
func vendorVariables(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command(vendorBinary(t, t.TempDir()), "-h").Output()
	if err != nil {
		t.Fatalf("vendor -h: %v", err)
	}
	vars := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  (LEAF_[A-Z0-9_]+)\s`).FindAllSubmatch(out, -1) {
		vars[string(m[1])] = true
	}
	if !vars["LEAF_NATS_URL"] || len(vars) < 20 {
		t.Fatalf("vendor -h lists %d variables: is its format changed?\n%s", len(vars), out)
	}
	return vars
}

// notTheVendors are variables a deployment sets for the Go runtime, not
// for the vendor's configuration.
var notTheVendors = map[string]bool{"GOMEMLIMIT": true, "GOMAXPROCS": true}

// checkVendorEnv checks a vendor's environment as a deployment file sets
// it: every variable one the vendor reads, and the settings of the
// production shape (docs/operations.md, "The environment of each vendor").
func checkVendorEnv(t *testing.T, where string, env map[string]string, known map[string]bool) {
	t.Helper()
	for name := range env {
		if !known[name] && !notTheVendors[name] {
			t.Errorf("%s sets %s, which the vendor does not read (vendor -h lists what it reads)", where, name)
		}
	}
	if env["LEAF_NATS_URL"] == "" {
		t.Errorf("%s sets no LEAF_NATS_URL: each vendor would start an embedded NATS server of its own", where)
	}
	if r := env["LEAF_KV_REPLICAS"]; r != "3" {
		t.Errorf("%s: LEAF_KV_REPLICAS=%q, want 3 (one copy of each bucket per NATS server of three)", where, r)
	}
	if _, port, err := net.SplitHostPort(env["LEAF_HTTP_ADDR"]); err != nil || port == "" {
		t.Errorf("%s: LEAF_HTTP_ADDR=%q, want host:port for Prometheus and the health checks", where, env["LEAF_HTTP_ADDR"])
	}
	if env["LEAF_NATS_USER"] != "leaf-vendor" {
		t.Errorf("%s: LEAF_NATS_USER=%q, want leaf-vendor, the vendors' user of docs/nats-accounts.conf", where, env["LEAF_NATS_USER"])
	}
}

// readEnvFile reads a systemd EnvironmentFile: KEY=VALUE lines, # comments.
func readEnvFile(t *testing.T, file string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`).MatchString(k) {
			t.Errorf("%s:%d: %q is not KEY=VALUE", file, n, line)
			continue
		}
		if _, dup := env[k]; dup {
			t.Errorf("%s:%d: %s set twice", file, n, k)
		}
		env[k] = v
	}
	return env
}

// unitDirectives returns a unit file's directives of one section.
func unitDirectives(t *testing.T, file, section string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	in := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			in = strings.Trim(line, "[]")
		case in == section:
			k, v, _ := strings.Cut(line, "=")
			out[k] = append(out[k], v)
		}
	}
	return out
}

// TestSystemdUnits lets systemd check the units of deploy/systemd
// (systemd-analyze verify: every section, key and value), with each program
// they run under /usr/local/bin replaced by a stand-in, since verify also
// checks that the programs exist.
func TestSystemdUnits(t *testing.T) {
	tool := testtool.Path(t, "systemd-analyze")
	units, _ := filepath.Glob(filepath.Join(root, "deploy", "systemd", "*.service"))
	if len(units) < 2 {
		t.Fatalf("deploy/systemd has units %v, want the vendor's and nats-server's", units)
	}
	dir := t.TempDir()
	programs := regexp.MustCompile(`/usr/local/bin/([a-z-]+)`)
	for _, unit := range units {
		data, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range programs.FindAllSubmatch(data, -1) {
			stub := filepath.Join(dir, string(m[1]))
			if err := os.WriteFile(stub, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		copied := filepath.Join(dir, filepath.Base(unit))
		if err := os.WriteFile(copied, programs.ReplaceAll(data, []byte(dir+"/$1")), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(tool, "verify", "--man=no", copied).CombinedOutput()
		// verify exits 0 on an unknown key or a bad value, which it only
		// prints: any output is a finding.
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(unit), err, out)
		}
	}

	vendor := unitDirectives(t, filepath.Join(root, "deploy", "systemd", "leaf-vendor.service"), "Service")
	if got := vendor["ExecStart"]; !slices.Equal(got, []string{"/usr/local/bin/vendor"}) {
		t.Errorf("leaf-vendor.service runs %q, want /usr/local/bin/vendor", got)
	}
	if got := vendor["EnvironmentFile"]; len(got) != 1 || filepath.Base(got[0]) != "vendor.env" {
		t.Errorf("leaf-vendor.service reads EnvironmentFile %q, want the shipped vendor.env installed", got)
	}
	if got := vendor["KillSignal"]; !slices.Equal(got, []string{"SIGTERM"}) {
		t.Errorf("leaf-vendor.service stops with %q: the vendor drains on SIGTERM", got)
	}
	if d, err := time.ParseDuration(strings.Join(vendor["TimeoutStopSec"], "") + "s"); err != nil || d < 20*time.Second {
		t.Errorf("leaf-vendor.service: TimeoutStopSec %q leaves the drain (up to 10 s) too little time", vendor["TimeoutStopSec"])
	}
	natsUnit := unitDirectives(t, filepath.Join(root, "deploy", "systemd", "nats-server.service"), "Service")
	if got := strings.Join(natsUnit["ExecStart"], ""); !strings.Contains(got, "/etc/nats/nats-server.conf") {
		t.Errorf("nats-server.service runs %q, want it to load docs/nats-server.conf installed as /etc/nats/nats-server.conf", got)
	}
	if got := natsUnit["KillSignal"]; !slices.Equal(got, []string{"SIGUSR2"}) {
		t.Errorf("nats-server.service stops with %q, want SIGUSR2 (lame duck: clients move over gently)", got)
	}
}

// TestSystemdEnvironment checks the environment files the units read: the
// vendor's sets only variables it reads, in the production shape, and the
// NATS server's sets every variable docs/nats-server.conf and
// docs/nats-accounts.conf read, and no other.
func TestSystemdEnvironment(t *testing.T) {
	env := readEnvFile(t, filepath.Join(root, "deploy", "systemd", "vendor.env"))
	checkVendorEnv(t, "deploy/systemd/vendor.env", env, vendorVariables(t))
	if n := len(strings.Split(env["LEAF_NATS_URL"], ",")); n != 3 {
		t.Errorf("vendor.env: LEAF_NATS_URL names %d servers, want the three of the NATS cluster", n)
	}

	natsEnv := readEnvFile(t, filepath.Join(root, "deploy", "systemd", "nats.env"))
	read := map[string]bool{}
	for _, conf := range []string{"nats-server.conf", "nats-accounts.conf"} {
		data, err := os.ReadFile(filepath.Join(root, "docs", conf))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, m := range regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)`).FindAllStringSubmatch(line, -1) {
				if m[1] != "VENDOR_PUBLISH" && !strings.HasPrefix(m[1], "JS") && !strings.HasPrefix(m[1], "KV") && !strings.HasPrefix(m[1], "SRV") && !strings.HasPrefix(m[1], "SYS") {
					read[m[1]] = true
				}
			}
		}
	}
	if len(read) < 3 {
		t.Fatalf("found only %v read from the environment by the NATS configuration", read)
	}
	for name := range read {
		if _, ok := natsEnv[name]; !ok {
			t.Errorf("deploy/systemd/nats.env does not set %s, which docs/nats-*.conf read (the server refuses to start without it)", name)
		}
	}
	for name := range natsEnv {
		if !read[name] {
			t.Errorf("deploy/systemd/nats.env sets %s, which docs/nats-*.conf do not read", name)
		}
	}
}

// k8sObject is the part of a Kubernetes object the tests read.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec yaml.Node `yaml:"spec"`
}

type k8sDeployment struct {
	Replicas int `yaml:"replicas"`
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Strategy struct {
		RollingUpdate struct {
			MaxUnavailable any `yaml:"maxUnavailable"`
		} `yaml:"rollingUpdate"`
	} `yaml:"strategy"`
	Template struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			TerminationGracePeriodSeconds int            `yaml:"terminationGracePeriodSeconds"`
			Containers                    []k8sContainer `yaml:"containers"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct{ Name, Key string } `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom        []any     `yaml:"envFrom"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

// loadManifest reads the Kubernetes example, every document of it.
func loadManifest(t *testing.T) []k8sObject {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", "leaf-vendor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var objs []k8sObject
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("deploy/kubernetes/leaf-vendor.yaml: %v", err)
		}
		objs = append(objs, o)
	}
}

// TestKubernetesManifest parses the Kubernetes example as YAML and checks
// what a cluster would only find out when it runs: the vendor's environment
// is one it reads, in the production shape; the selectors pick the pods;
// the probes ask the port LEAF_HTTP_ADDR serves; a rolling update keeps
// every vendor serving until its replacement is ready; a stopping vendor
// has the time to drain.
func TestKubernetesManifest(t *testing.T) {
	objs := loadManifest(t)
	byKind := map[string]k8sObject{}
	for _, o := range objs {
		want := map[string]string{"Deployment": "apps/v1", "PodDisruptionBudget": "policy/v1", "Service": "v1"}[o.Kind]
		if want == "" || o.APIVersion != want {
			t.Errorf("%s %s: apiVersion %q, want a Deployment (apps/v1), PodDisruptionBudget (policy/v1) or Service (v1)", o.Kind, o.Metadata.Name, o.APIVersion)
		}
		byKind[o.Kind] = o
	}
	spec := func(kind string) *yaml.Node { n := byKind[kind].Spec; return &n }
	var d k8sDeployment
	if err := spec("Deployment").Decode(&d); err != nil {
		t.Fatalf("the Deployment's spec: %v", err)
	}
	labels := d.Template.Metadata.Labels
	matches := func(sel map[string]string) bool {
		if len(sel) == 0 {
			return false
		}
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return true
	}
	if !matches(d.Selector.MatchLabels) {
		t.Errorf("the Deployment's selector %v does not pick its pods %v", d.Selector.MatchLabels, labels)
	}
	var pdb struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	}
	var svc struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			TargetPort any `yaml:"targetPort"`
		} `yaml:"ports"`
	}
	if err := spec("PodDisruptionBudget").Decode(&pdb); err != nil || !matches(pdb.Selector.MatchLabels) {
		t.Errorf("the PodDisruptionBudget's selector %v does not pick the vendors %v (%v)", pdb.Selector.MatchLabels, labels, err)
	}
	if err := spec("Service").Decode(&svc); err != nil || !matches(svc.Selector) {
		t.Errorf("the Service's selector %v does not pick the vendors %v (%v)", svc.Selector, labels, err)
	}
	if d.Replicas < 3 {
		t.Errorf("%d replicas: run at least three vendors, on different nodes", d.Replicas)
	}
	if mu := d.Strategy.RollingUpdate.MaxUnavailable; mu != 0 {
		t.Errorf("rollingUpdate.maxUnavailable %v: want 0, so that a vendor stops only when its replacement is ready", mu)
	}
	if g := d.Template.Spec.TerminationGracePeriodSeconds; g < 20 {
		t.Errorf("terminationGracePeriodSeconds %d leaves the drain (up to 10 s) too little time", g)
	}
	if len(d.Template.Spec.Containers) != 1 {
		t.Fatalf("the pod has %d containers, want the vendor", len(d.Template.Spec.Containers))
	}
	c := d.Template.Spec.Containers[0]
	if len(c.Command) > 0 || len(c.Args) > 0 || len(c.EnvFrom) > 0 {
		t.Errorf("the vendor container sets command %v, args %v or envFrom: the image's entrypoint serves, and the environment is listed so that it can be checked", c.Command, c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != "" && e.ValueFrom.SecretKeyRef.Key != "":
			env[e.Name] = "from secret " + e.ValueFrom.SecretKeyRef.Name
		case e.ValueFrom != nil:
			t.Errorf("env %s: valueFrom without a secret's name and key", e.Name)
		default:
			env[e.Name] = e.Value
		}
	}
	checkVendorEnv(t, "deploy/kubernetes/leaf-vendor.yaml", env, vendorVariables(t))
	_, httpPort, _ := net.SplitHostPort(env["LEAF_HTTP_ADDR"])
	portName := ""
	for _, p := range c.Ports {
		if strconv.Itoa(p.ContainerPort) == httpPort {
			portName = p.Name
		}
	}
	if portName == "" {
		t.Errorf("no containerPort is LEAF_HTTP_ADDR's port %s", httpPort)
	}
	for _, probe := range []struct {
		name, path string
		p          *k8sProbe
	}{{"readinessProbe", "/readyz", c.ReadinessProbe}, {"livenessProbe", "/healthz", c.LivenessProbe}} {
		if probe.p == nil || probe.p.HTTPGet.Path != probe.path || (probe.p.HTTPGet.Port != portName && probe.p.HTTPGet.Port != httpPort) {
			t.Errorf("%s: want httpGet %s on LEAF_HTTP_ADDR's port (%s)", probe.name, probe.path, portName)
		}
	}
	if len(svc.Ports) != 1 || (svc.Ports[0].TargetPort != portName && svc.Ports[0].TargetPort != httpPort) {
		t.Errorf("the Service's ports %+v: want LEAF_HTTP_ADDR's port", svc.Ports)
	}
}

// TestDeploymentsAgree checks that the runbook's table of the environment
// of each vendor, the systemd environment file and the Kubernetes example
// set the same variables: one list, whichever way the vendors run.
func TestDeploymentsAgree(t *testing.T) {
	names := func(m map[string]string) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	hosts := names(readEnvFile(t, filepath.Join(root, "deploy", "systemd", "vendor.env")))
	var d k8sDeployment
	for _, o := range loadManifest(t) {
		if o.Kind == "Deployment" {
			if err := o.Spec.Decode(&d); err != nil {
				t.Fatal(err)
			}
		}
	}
	k8s := map[string]string{}
	for _, c := range d.Template.Spec.Containers {
		for _, e := range c.Env {
			k8s[e.Name] = ""
		}
	}
	runbook := runbookSection(t, "The environment of each vendor")
	documented := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z][A-Z0-9_]*)`").FindAllStringSubmatch(runbook, -1) {
		documented[m[1]] = ""
	}
	if !slices.Equal(hosts, names(k8s)) {
		t.Errorf("deploy/systemd/vendor.env sets %v, deploy/kubernetes/leaf-vendor.yaml %v: set the same", hosts, names(k8s))
	}
	if !slices.Equal(hosts, names(documented)) {
		t.Errorf("deploy/systemd/vendor.env sets %v, the runbook's table (docs/operations.md) lists %v: list what the files set", hosts, names(documented))
	}
}
