package pgtest_test

import (
	"database/sql"
	"testing"

	_ "github.com/lib/pq"

	"github.com/leaf-nats/leaf/internal/pgtest"
)

func query(t *testing.T, dsn, q string) string {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var s string
	if err := db.QueryRow(q).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s
}

func TestDSNIsolatesSchemas(t *testing.T) {
	a, b := pgtest.DSN(t), pgtest.DSN(t)
	sa, sb := query(t, a, "SELECT current_schema()"), query(t, b, "SELECT current_schema()")
	if sa == sb {
		t.Fatalf("two DSNs share schema %s", sa)
	}
}

func TestServerRestarts(t *testing.T) {
	s := pgtest.StartServer(t)
	query(t, s.DSN(), "SELECT 1")
	s.Stop()
	s.Start()
	query(t, s.DSN(), "SELECT 1")
}
