package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/testtool"
)

// vendorBin is the vendor binary TestMain builds for the whole run (with
// -tags e2e): the one piece of state the tests share, written before any
// test starts.
var vendorBin string

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	if addr := os.Getenv(holdAddrVar); addr != "" {
		return connHolder(addr)
	}
	// The passwords of the shipped configuration, constants, for every
	// test that runs it (writeDocsConf).
	for k, user := range docsPasswordVars {
		if err := os.Setenv(k, docsPassword(user)); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
	}
	// The scenarios that call t.Parallel mostly wait: three run at once
	// (GOMAXPROCS, go test's default, when that is more), unless
	// -parallel says otherwise. Only this package: scripts/test.sh's
	// other packages keep go test's default.
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		if err := flag.Set("test.parallel", strconv.Itoa(max(parallelScenarios, runtime.GOMAXPROCS(0)))); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "leaf-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// LEAF_E2E_VENDOR_BIN runs the scenarios against another build, such
	// as an older release, to count what it does wrong.
	if bin := os.Getenv("LEAF_E2E_VENDOR_BIN"); bin != "" {
		vendorBin = bin
		return m.Run()
	}
	vendorBin = filepath.Join(dir, "vendor")
	// The e2e build tag adds the clock hooks the clock-fault tests step
	// (cmd/vendor/clock_e2e.go); the binary users run has none.
	args := []string{"build", "-tags", "e2e", "-o", vendorBin}
	if os.Getenv("LEAF_E2E_VENDOR_RACE") == "1" {
		args = append(args, "-race")
	}
	args = append(args, "github.com/leaf-nats/leaf/cmd/vendor")
	if out, err := exec.Command(goTool(), args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go %v: %v\n%s", args, err, out)
		return 1
	}
	return m.Run()
}

// parallelScenarios is how many parallel scenarios run at once by default:
// on two cores, three kept the CPU 60-100% busy and took the package from
// about 890 s to about 610 s; two left it half idle.
const parallelScenarios = 3

// goTool finds the go command that runs this test.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// soak reports whether LEAF_E2E_SOAK asks for the long run.
func soak() bool { return os.Getenv("LEAF_E2E_SOAK") == "1" }

// scaled returns n, or ten times n in a soak run.
func scaled[T int | time.Duration](n T) T {
	if soak() {
		return 10 * n
	}
	return n
}

// report prints a scenario's summary line to the test log and standard
// output, and appends it to LEAF_E2E_SUMMARY when that names a file.
func report(t testing.TB, format string, a ...any) {
	t.Helper()
	line := fmt.Sprintf(format, a...)
	t.Log(line)
	fmt.Println("e2e summary:", line)
	if path := os.Getenv("LEAF_E2E_SUMMARY"); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Errorf("LEAF_E2E_SUMMARY: %v", err)
			return
		}
		defer f.Close()
		fmt.Fprintln(f, line)
	}
}

// eventually and within are testtool's, under the names these tests use.
var (
	eventually = testtool.Eventually
	within     = testtool.Within
)
