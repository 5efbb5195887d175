// Package pgtest gives tests real Postgres: an isolated schema in the
// server named by LEAF_TEST_POSTGRES_URL (DSN), or a private throwaway
// server a test may stop and restart (StartServer). scripts/test.sh sets
// the environment. Without it tests skip, except under CI=true, where they
// fail: CI must not pass by testing nothing.
package pgtest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/lib/pq"

	"github.com/leaf-nats/leaf/internal/natstest"
)

// Environment variables, set by scripts/test.sh.
const (
	EnvURL    = "LEAF_TEST_POSTGRES_URL" // a server to make schemas in
	EnvBinDir = "LEAF_TEST_PG_BINDIR"    // initdb, pg_ctl
	EnvUser   = "LEAF_TEST_PG_USER"      // runs them when the test runs as root
)

// unavailable skips the test, or fails it under CI.
func unavailable(t testing.TB, why string) {
	t.Helper()
	msg := why + "; run the tests with scripts/test.sh, which starts a throwaway Postgres"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// DSN returns the URL of a new schema in the server at
// LEAF_TEST_POSTGRES_URL, first on the search_path of every connection
// made with it, and drops the schema when the test ends.
func DSN(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvURL)
	if base == "" {
		unavailable(t, EnvURL+" is not set")
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s=%q: want a postgres:// URL", EnvURL, base)
	}
	db := open(t, base)
	schema := "leaf_test_" + randomHex(t)
	if _, err := db.Exec(`CREATE SCHEMA ` + pq.QuoteIdentifier(schema)); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec(`DROP SCHEMA ` + pq.QuoteIdentifier(schema) + ` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	// lib/pq sends parameters it does not know as run-time parameters.
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// open connects to dsn and closes the pool when the test ends.
func open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatalf("connect to %s: %v", dsn, err)
	}
	return db
}

func randomHex(t testing.TB) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// Server is a private Postgres server for one test.
type Server struct {
	t      testing.TB
	bin    string
	dir    string // data directory
	sock   string // Unix socket directory
	port   int
	asUser string // runs the binaries when the test runs as root
	// settings are the server's settings beyond the defaults, as
	// postgres -c takes them (name=value).
	settings []string
}

// StartServer initialises and starts a Postgres server in a temporary
// directory from the binaries in LEAF_TEST_PG_BINDIR, and removes it when
// the test ends. Running as root, it runs them as LEAF_TEST_PG_USER:
// Postgres refuses to run as root.
func StartServer(t testing.TB) *Server {
	t.Helper()
	return StartServerWith(t)
}

// StartServerWith is StartServer with server settings (name=value, as
// postgres -c takes them), such as shared_preload_libraries=pg_stat_statements
// for a test that counts the statements a vendor runs.
func StartServerWith(t testing.TB, settings ...string) *Server {
	t.Helper()
	bin := os.Getenv(EnvBinDir)
	if bin == "" {
		unavailable(t, EnvBinDir+" is not set")
	}
	s := &Server{t: t, bin: bin, settings: settings}
	if os.Geteuid() == 0 {
		s.asUser = os.Getenv(EnvUser)
		if s.asUser == "" {
			unavailable(t, "running as root and "+EnvUser+" is not set")
		}
	}
	// Not t.TempDir: its parent is private to root, and the server's user
	// must reach the data directory.
	root, err := os.MkdirTemp("", "leaf-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	s.dir, s.sock = filepath.Join(root, "data"), filepath.Join(root, "sock")
	for _, d := range []string{s.dir, s.sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		s.chown(d)
	}
	s.run("initdb", "-D", s.dir, "-U", "postgres", "--auth=trust", "-E", "UTF8")
	s.port = natstest.FreePort(t)
	s.Start()
	t.Cleanup(func() {
		// Ignore the error: the test may have stopped the server.
		_ = s.command("pg_ctl", "-D", s.dir, "-m", "immediate", "-w", "stop").Run()
	})
	return s
}

// DSN is the server's URL.
func (s *Server) DSN() string {
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(s.port) + "/postgres?sslmode=disable"
}

// Start starts the server, on the same port every time.
func (s *Server) Start() {
	s.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", s.port, s.sock)
	for _, kv := range s.settings {
		opts += " -c " + kv
	}
	s.run("pg_ctl", "-D", s.dir, "-l", filepath.Join(s.dir, "server.log"), "-w", "-t", "60", "-o", opts, "start")
}

// Stop stops the server, closing every connection.
func (s *Server) Stop() {
	s.t.Helper()
	s.run("pg_ctl", "-D", s.dir, "-m", "fast", "-w", "stop")
}

func (s *Server) run(name string, args ...string) {
	s.t.Helper()
	if out, err := s.command(name, args...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		s.t.Fatalf("%s %v: %v\n%s\n%s", name, args, err, out, log)
	}
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, name)
	if s.asUser == "" {
		return exec.Command(path, args...)
	}
	return exec.Command("runuser", append([]string{"-u", s.asUser, "--", path}, args...)...)
}

func (s *Server) chown(path string) {
	s.t.Helper()
	if s.asUser == "" {
		return
	}
	u, err := user.Lookup(s.asUser)
	if err != nil {
		s.t.Fatalf("%s=%s: %v", EnvUser, s.asUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		s.t.Fatal(err)
	}
}

// DataDir is the server's data directory, owned by the server's user. A
// test may copy it while the server is stopped and put the copy back: a
// store restored from a backup.
func (s *Server) DataDir() string { return s.dir }
