package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/kv"
)

// natsCluster is one embedded nats-server, or several routed into one
// JetStream cluster, living as long as the test.
type natsCluster struct {
	servers []*server.Server
}

// startNATS starts a single node.
func startNATS(t testing.TB) *natsCluster {
	t.Helper()
	return &natsCluster{servers: []*server.Server{natstest.Server(t)}}
}

// startNATSCluster starts n routed nodes with JetStream and waits until
// JetStream answers.
func startNATSCluster(t testing.TB, n int) *natsCluster {
	t.Helper()
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range ports {
		ports[i] = natstest.FreePort(t)
		routes[i] = "nats://127.0.0.1:" + strconv.Itoa(ports[i])
	}
	c := &natsCluster{}
	for i := range n {
		c.servers = append(c.servers, natstest.ServerWith(t, natsserver.Config{
			Name:        fmt.Sprintf("n%d", i+1),
			ClusterName: "leaf-e2e",
			Cluster:     "127.0.0.1:" + strconv.Itoa(ports[i]),
			Routes:      routes,
		}))
	}
	js := c.js(t)
	eventually(t, 60*time.Second, "JetStream meta leader in the cluster", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
	return c
}

// url lists every node's client URL, as LEAF_NATS_URL.
func (c *natsCluster) url() string {
	urls := make([]string, len(c.servers))
	for i, s := range c.servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// conn connects to the cluster (any node, reconnecting for ever) until
// the test ends.
func (c *natsCluster) conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.url(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to %s: %v", c.url(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (c *natsCluster) js(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(c.conn(t))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// shutdown stops the node named name.
func (c *natsCluster) shutdown(t testing.TB, name string) {
	t.Helper()
	for _, s := range c.servers {
		if s.Name() == name {
			s.Shutdown()
			s.WaitForShutdown()
			return
		}
	}
	t.Fatalf("no node %q", name)
}

// workerFiller holds worker-ID lease keys on behalf of phantom workers,
// refreshing them before the bucket's TTL expires them, so that a test can
// leave exactly the worker IDs it wants free.
type workerFiller struct {
	leases jetstream.KeyValue
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	held map[int]bool
}

// fillRange is the worker IDs fillWorkerIDs holds but for those left
// free, and the LEAF_WORKER_ID_RANGE of the vendors of the tests that fill
// them: a few IDs, since the filler renews each every quarter TTL (all
// 1,024 kept the test process busy with a thousand writes a second).
const fillFirst, fillLast, fillRange = 4, 11, "4-11"

// fillWorkerIDs creates the lease buckets as a vendor would, with ttl, and
// holds every worker ID of fillRange except those in free.
func fillWorkerIDs(t testing.TB, js jetstream.JetStream, ttl time.Duration, free ...int) *workerFiller {
	t.Helper()
	ctx := context.Background()
	leases := createLeaseBuckets(t, js, ttl, 1)
	f := &workerFiller{leases: leases, held: map[int]bool{}}
	for id := fillFirst; id <= fillLast; id++ {
		f.held[id] = true
	}
	for _, id := range free {
		delete(f.held, id)
	}
	f.refresh(ctx)
	rctx, cancel := context.WithCancel(ctx)
	f.cancel = cancel
	f.wg.Go(func() {
		tick := time.NewTicker(ttl / 4)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
				f.refresh(rctx)
			}
		}
	})
	t.Cleanup(f.stop)
	return f
}

// createLeaseBuckets creates the worker-ID buckets as a vendor would (or an
// operator with nats kv add), waits until both answer reads, and records a
// last timestamp for every worker ID.
func createLeaseBuckets(t testing.TB, js jetstream.JetStream, ttl time.Duration, replicas int) jetstream.KeyValue {
	t.Helper()
	ctx := context.Background()
	leases, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: kv.WorkersBucket, Description: "leaf-nats worker-ID leases",
		History: 1, TTL: ttl, Replicas: replicas, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatalf("create %s: %v", kv.WorkersBucket, err)
	}
	clocks, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: kv.ClocksBucket, Description: "leaf-nats worker-ID last timestamps",
		History: 1, Replicas: replicas, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatalf("create %s: %v", kv.ClocksBucket, err)
	}
	for _, b := range []jetstream.KeyValue{leases, clocks} {
		eventually(t, 30*time.Second, b.Bucket()+" answering reads", func() bool {
			_, err := b.Get(ctx, "worker.0")
			return errors.Is(err, jetstream.ErrKeyNotFound)
		})
	}
	// Every worker ID has a last timestamp, as in a cluster that has run
	// for a while: claims do not wait out the quarantine of a new bucket
	// (TestWipedNATSStore is about that one).
	for id := range 1024 {
		if _, err := clocks.Put(ctx, workerKey(id), []byte("0")); err != nil {
			t.Fatalf("record worker ID %d: %v", id, err)
		}
	}
	return leases
}

func (f *workerFiller) refresh(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.held {
		f.leases.Put(ctx, workerKey(id), []byte(`{"holder":"e2e filler"}`))
	}
}

// release stops holding id and deletes its key, so a vendor can claim it.
func (f *workerFiller) release(t testing.TB, id int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.held, id)
	if err := f.leases.Delete(context.Background(), workerKey(id)); err != nil {
		t.Fatalf("delete %s: %v", workerKey(id), err)
	}
}

func (f *workerFiller) stop() {
	f.cancel()
	f.wg.Wait()
}

func workerKey(id int) string { return "worker." + strconv.Itoa(id) }

// leaseHeld reports whether worker ID id's lease key exists.
func leaseHeld(t testing.TB, js jetstream.JetStream, id int) bool {
	t.Helper()
	leases, err := js.KeyValue(context.Background(), kv.WorkersBucket)
	if err != nil {
		t.Fatalf("open %s: %v", kv.WorkersBucket, err)
	}
	_, err = leases.Get(context.Background(), workerKey(id))
	return err == nil
}

// recordedLast reads worker ID id's last timestamp from the clocks bucket
// and its revision.
func recordedLast(t testing.TB, js jetstream.JetStream, id int) (int64, uint64) {
	t.Helper()
	// During a failover JetStream calls time out for a while: retry.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ms, rev, err := readRecordedLast(js, id)
		if err == nil {
			return ms, rev
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %s %s: %v", kv.ClocksBucket, workerKey(id), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func readRecordedLast(js jetstream.JetStream, id int) (int64, uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	clocks, err := js.KeyValue(ctx, kv.ClocksBucket)
	if err != nil {
		return 0, 0, err
	}
	e, err := clocks.Get(ctx, workerKey(id))
	if err != nil {
		return 0, 0, err
	}
	ms, _, err := kv.ParseClock(e.Value())
	if err != nil {
		return 0, 0, fmt.Errorf("%q: %w", e.Value(), err)
	}
	return ms, e.Revision(), nil
}

// restartableNATS is a single nats-server on a fixed port and store
// directory, which a test stops, wipes and starts again: a NATS pod
// restarted, with or without its volume.
type restartableNATS struct {
	t    testing.TB
	port int
	dir  string
	srv  *server.Server
}

func startRestartableNATS(t testing.TB) *restartableNATS {
	t.Helper()
	r := &restartableNATS{t: t, port: natstest.FreePort(t), dir: t.TempDir()}
	r.start(nil)
	return r
}

// start starts the server on its port and directory; configure, when set,
// edits its options (a smaller max_payload).
func (r *restartableNATS) start(configure func(*server.Options)) {
	r.t.Helper()
	r.srv = natstest.ServerWith(r.t, natsserver.Config{Listen: "127.0.0.1:" + strconv.Itoa(r.port), StoreDir: r.dir, Configure: configure})
}

func (r *restartableNATS) stop() {
	r.srv.Shutdown()
	r.srv.WaitForShutdown()
}

// wipe deletes the stopped server's JetStream data: every bucket, lease
// and recorded timestamp.
func (r *restartableNATS) wipe() {
	r.t.Helper()
	if err := os.RemoveAll(r.dir); err != nil {
		r.t.Fatal(err)
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		r.t.Fatal(err)
	}
}

func (r *restartableNATS) url() string { return "nats://127.0.0.1:" + strconv.Itoa(r.port) }

// conn connects, reconnecting for ever, until the test ends.
func (r *restartableNATS) conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(r.url(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
