package pgstore_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/pgtest"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/segment/pgstore"
	"github.com/leaf-nats/leaf/segment/segmenttest"
)

func TestStore(t *testing.T) {
	segmenttest.Run(t, func(t *testing.T, restartable bool) segmenttest.Backend {
		if !restartable {
			dsn := pgtest.DSN(t)
			return segmenttest.Backend{Open: func(t *testing.T) segmenttest.Store { return open(t, dsn) }}
		}
		srv := pgtest.StartServer(t)
		return segmenttest.Backend{
			Open:  func(t *testing.T) segmenttest.Store { return open(t, srv.DSN()) },
			Stop:  func(*testing.T) { srv.Stop() },
			Start: func(*testing.T) { srv.Start() },
		}
	})
}

func open(t *testing.T, dsn string) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(dsn)
	if err != nil {
		t.Fatalf("pgstore.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestOpenRefusesMalformedURL(t *testing.T) {
	if _, err := pgstore.Open("postgres://host:notaport/db"); err == nil {
		t.Fatal("Open of a malformed URL succeeded")
	}
}

func TestDownDatabaseIsAnErrorPerCall(t *testing.T) {
	srv := pgtest.StartServer(t)
	s := open(t, srv.DSN())
	srv.Stop()
	if err := s.Ping(context.Background()); err == nil {
		t.Fatal("Ping of a stopped server succeeded")
	}
	srv.Start()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping after restart: %v", err)
	}
	if _, err := s.Alloc(context.Background(), "nope", 0, nil); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Alloc(nope) = %v, want ErrUnknownTag", err)
	}
}

// A copy of a database (CREATE DATABASE ... TEMPLATE, or a restored dump)
// carries the store's row with its random id; the copy must still have an
// identity of its own, or the cluster contract would take the two for one
// store and both would hand out the same IDs.
func TestCopyHasAnIdentityOfItsOwn(t *testing.T) {
	base := os.Getenv(pgtest.EnvURL)
	if base == "" {
		pgtest.DSN(t) // fails under CI, skips otherwise, saying why
	}
	admin, err := sql.Open("postgres", base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	orig, clone := "leaf_orig_"+suffix, "leaf_clone_"+suffix
	dsn := func(db string) string {
		u, _ := url.Parse(base)
		u.Path = "/" + db
		return u.String()
	}
	for _, db := range []string{orig, clone} {
		t.Cleanup(func() { admin.Exec(`DROP DATABASE IF EXISTS ` + db + ` WITH (FORCE)`) })
	}
	if _, err := admin.Exec(`CREATE DATABASE ` + orig); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := pgstore.Open(dsn(orig))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Create(ctx, segment.Row{Tag: "order", Step: 10}); err != nil {
		t.Fatal(err)
	}
	infoA, err := a.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.Close() // a template must have no sessions
	if _, err := admin.Exec(`CREATE DATABASE ` + clone + ` TEMPLATE ` + orig); err != nil {
		t.Fatal(err)
	}
	b := open(t, dsn(clone))
	infoB, err := b.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a = open(t, dsn(orig))
	if again, err := a.Info(ctx); err != nil || again.ID != infoA.ID {
		t.Fatalf("the original's identity changed: %q, then %q (%v)", infoA.ID, again.ID, err)
	}
	row, _, _ := strings.Cut(infoA.ID, "@")
	if !strings.HasPrefix(infoB.ID, row+"@") || infoB.ID == infoA.ID {
		t.Fatalf("original %q, copy %q: want the same row id, and identities that differ", infoA.ID, infoB.ID)
	}
}
