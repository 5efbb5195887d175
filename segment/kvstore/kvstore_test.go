package kvstore_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/segment/kvstore"
	"github.com/leaf-nats/leaf/segment/segmenttest"
)

func TestSegmentStore(t *testing.T) {
	segmenttest.Run(t, func(t *testing.T, _ bool) segmenttest.Backend {
		dir := t.TempDir()
		srv := natstest.ServerWith(t, natsserver.Config{StoreDir: dir})
		url := srv.ClientURL()
		port := srv.Addr().(*net.TCPAddr).Port
		return segmenttest.Backend{
			Open: func(t *testing.T) segmenttest.Store { return openStore(t, url) },
			Stop: func(*testing.T) {
				srv.Shutdown()
				srv.WaitForShutdown()
			},
			Start: func(t *testing.T) {
				// The same port and data: clients reconnect to it.
				srv = natstest.ServerWith(t, natsserver.Config{Listen: "127.0.0.1:" + strconv.Itoa(port), StoreDir: dir})
			},
		}
	})
}

// openStore connects to url with a connection of its own that keeps
// reconnecting, as a vendor's would.
func openStore(t *testing.T, url string) *kvstore.Store {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := kvstore.New(context.Background(), kv.Plain(js), 1)
	if err != nil {
		t.Fatalf("kvstore.New: %v", err)
	}
	return s
}

// A list that runs while other vendors allocate finds every tag: a
// watcher alone misses a key updated under it (a quarter of the lists did
// here), which made a tag look unknown (a 404) and let a seal skip it.
func TestListWhileAllocating(t *testing.T) {
	s := natstest.Server(t)
	ctx := context.Background()
	open := func() *kvstore.Store {
		js, err := jetstream.New(natstest.Conn(t, s))
		if err != nil {
			t.Fatal(err)
		}
		st, err := kvstore.New(ctx, kv.Plain(js), 1)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := open()
	for _, tag := range []string{"a", "order", "z"} {
		if err := st.Create(ctx, segment.Row{Tag: tag, Step: 1}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		alloc := open()
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := alloc.Alloc(ctx, "order", 1, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	for i := range 300 {
		rows, err := st.Tags(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var tags []string
		for _, r := range rows {
			tags = append(tags, r.Tag)
		}
		if !slices.Equal(tags, []string{"a", "order", "z"}) {
			t.Fatalf("list %d while allocating: %v", i, tags)
		}
	}
}
