package pgstore_test

import (
	"context"
	"errors"
	"testing"

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
	if _, err := s.Alloc(context.Background(), "nope", 0); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Alloc(nope) = %v, want ErrUnknownTag", err)
	}
}
