package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// logBuffer collects a process's output and wakes waiters on every write.
type logBuffer struct {
	mu      sync.Mutex
	b       []byte
	changed chan struct{}
}

func newLogBuffer() *logBuffer { return &logBuffer{changed: make(chan struct{})} }

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

// snapshot returns the text so far and a channel closed at the next write.
func (l *logBuffer) snapshot() (string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b), l.changed
}

func (l *logBuffer) String() string { s, _ := l.snapshot(); return s }

// vendor is one vendor process, restartable with the same environment.
// Its output of every run is kept for the failure report.
type vendor struct {
	t    testing.TB
	name string
	env  []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	out  *logBuffer    // this run's output
	done chan struct{} // closed when this run's process has exited
	err  error         // this run's exit status, once done
	runs []*logBuffer
}

// startVendor starts a vendor process with the given LEAF_* settings on top
// of test defaults (a free HTTP port, a private store directory), waits
// until it logs "vendor serving", and kills it when the test ends.
func startVendor(t testing.TB, name string, env map[string]string) *vendor {
	t.Helper()
	v := newVendor(t, name, env)
	v.start()
	v.waitServing()
	return v
}

// newVendor prepares a vendor without starting it.
func newVendor(t testing.TB, name string, env map[string]string) *vendor {
	t.Helper()
	v := &vendor{t: t, name: name, env: vendorEnv(t, env)}
	t.Cleanup(func() {
		v.kill()
		if t.Failed() || os.Getenv("LEAF_E2E_VERBOSE") == "1" {
			v.dumpLogs()
		}
	})
	return v
}

// vendorEnv is the process environment: ours without LEAF_* variables,
// then the test defaults (a free HTTP port, a private store directory, a
// 3s lease TTL), then env.
func vendorEnv(t testing.TB, env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEAF_") {
			out = append(out, kv)
		}
	}
	defaults := map[string]string{
		"LEAF_HTTP_ADDR":      "127.0.0.1:0",
		"LEAF_NATS_STORE_DIR": t.TempDir(),
		// On a new NATS server a worker ID is vended with only a lease
		// TTL after its bucket was made: 3s, not the default 30s.
		"LEAF_WORKER_LEASE_TTL": "3s",
	}
	for k, val := range defaults {
		if _, ok := env[k]; !ok {
			out = append(out, k+"="+val)
		}
	}
	for k, val := range env {
		out = append(out, k+"="+val)
	}
	return out
}

// start runs the process (again, after a kill or stop).
func (v *vendor) start() {
	v.t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.done != nil {
		select {
		case <-v.done:
		default:
			v.t.Fatalf("vendor %s: start while running", v.name)
		}
	}
	out := newLogBuffer()
	cmd := exec.Command(vendorBin)
	cmd.Env = v.env
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		v.t.Fatalf("vendor %s: %v", v.name, err)
	}
	done := make(chan struct{})
	v.cmd, v.out, v.done = cmd, out, done
	v.runs = append(v.runs, out)
	go func() { // owned by the process: ends when it exits, awaited by kill
		err := cmd.Wait()
		v.mu.Lock()
		v.err = err
		v.mu.Unlock()
		close(done)
	}()
}

// current returns this run's output and exit channel.
func (v *vendor) current() (*logBuffer, chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.out, v.done
}

// waitLog waits until this run's output matches re and returns the first
// match's submatches. It fails the test if the process exits first.
func (v *vendor) waitLog(re *regexp.Regexp, timeout time.Duration) []string {
	v.t.Helper()
	m, err := v.awaitLog(re, timeout)
	if err != nil {
		v.t.Fatalf("vendor %s: %v\n%s", v.name, err, v.tail(40))
	}
	return m
}

// awaitLog is waitLog returning the failure instead.
func (v *vendor) awaitLog(re *regexp.Regexp, timeout time.Duration) ([]string, error) {
	out, done := v.current()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s, changed := out.snapshot()
		if m := re.FindStringSubmatch(s); m != nil {
			return m, nil
		}
		select {
		case <-changed:
		case <-done:
			if m := re.FindStringSubmatch(out.String()); m != nil {
				return m, nil
			}
			return nil, fmt.Errorf("exited (%v) before logging %q", v.exitErr(), re)
		case <-timer.C:
			return nil, fmt.Errorf("no log line %q within %v", re, timeout)
		}
	}
}

var (
	servingLine = regexp.MustCompile(`msg="vendor serving".* worker_id=(\d+)`)
	httpLine    = regexp.MustCompile(`(?:addr|url)=(?:http://)?(127\.0\.0\.1:\d+)`)
)

// waitServing waits for "vendor serving" and returns the worker ID.
func (v *vendor) waitServing() int {
	v.t.Helper()
	m := v.waitLog(servingLine, 60*time.Second)
	id, _ := strconv.Atoi(m[1])
	return id
}

// httpAddr is this run's HTTP address.
func (v *vendor) httpAddr() string {
	v.t.Helper()
	return v.waitLog(httpLine, 30*time.Second)[1]
}

// count returns how many lines of this run's output contain s.
func (v *vendor) count(s string) int {
	out, _ := v.current()
	return strings.Count(out.String(), s)
}

// signal sends sig to the running process.
func (v *vendor) signal(sig syscall.Signal) {
	v.t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.cmd.Process.Signal(sig); err != nil {
		v.t.Fatalf("vendor %s: signal %v: %v", v.name, sig, err)
	}
}

// kill sends SIGKILL (after SIGCONT, in case it is stopped) and waits for
// the exit. It does nothing when the process has already exited.
func (v *vendor) kill() {
	v.mu.Lock()
	cmd, done := v.cmd, v.done
	v.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Kill()
	<-done
}

// stop sends SIGTERM and returns the exit code once the process has
// drained and exited.
func (v *vendor) stop(timeout time.Duration) int {
	v.t.Helper()
	v.signal(syscall.SIGTERM)
	return v.wait(timeout)
}

// wait waits for the process to exit and returns its exit code.
func (v *vendor) wait(timeout time.Duration) int {
	v.t.Helper()
	_, done := v.current()
	select {
	case <-done:
	case <-time.After(timeout):
		v.t.Fatalf("vendor %s did not exit within %v\n%s", v.name, timeout, v.tail(40))
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cmd.ProcessState.ExitCode()
}

// running reports whether this run's process is alive.
func (v *vendor) running() bool {
	_, done := v.current()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (v *vendor) exitErr() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

// tail returns the last n lines of this run's output.
func (v *vendor) tail(n int) string {
	out, _ := v.current()
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (v *vendor) dumpLogs() {
	v.mu.Lock()
	runs := v.runs
	v.mu.Unlock()
	for i, out := range runs {
		lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
		const most = 60
		if len(lines) > most {
			lines = append([]string{fmt.Sprintf("... %d lines ...", len(lines)-most)}, lines[len(lines)-most:]...)
		}
		v.t.Logf("vendor %s run %d:\n%s", v.name, i+1, strings.Join(lines, "\n"))
	}
}

// vendorCommand runs the vendor binary with args (e.g. tags add) and
// returns its combined output, failing the test on a non-zero exit.
func vendorCommand(t testing.TB, env map[string]string, args ...string) string {
	t.Helper()
	code, out := runVendor(t, env, args...)
	if code != 0 {
		t.Fatalf("vendor %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}
