package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/kv"
)

// TestClusterLeaderLoss runs three vendors on a three-node JetStream
// cluster with every KV bucket replicated three times, finds the node
// leading the lease bucket's stream and shuts it down under load. Vending
// goes on (the vendors know all three URLs), leases are renewed on the new
// leader, and no ID repeats. Renewal failures during the election are
// logged; a vendor that lost its lease must notice and claim again.
func TestClusterLeaderLoss(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	nats := startNATSCluster(t, 3)
	env := map[string]string{
		"LEAF_NATS_URL":         nats.url(),
		"LEAF_KV_REPLICAS":      "3",
		"LEAF_WORKER_LEASE_TTL": "4s",
	}
	// The buckets are made up front, as an operator would: a vendor that
	// creates a replicated bucket itself can fail at once while the new
	// stream has no leader yet (TestFirstStartOnCluster).
	createLeaseBuckets(t, nats.js(t), 4*time.Second, 3)
	vendorCommand(t, env, "tags", "add", "e2e", "-step", "10000")
	vendors := startVendors(t, "v", 3, env)

	nc := nats.conn(t)
	sf, seg, stopLoad := startMixedLoad(t, nc, "leader loss", loadSpec{batch: 500, clients: 2, timeout: 3 * time.Second})
	sf.waitOK(t, 100, 30*time.Second, "before the failover")
	seg.waitOK(t, 100, 30*time.Second, "before the failover")

	ctx := context.Background()
	stream, err := nats.js(t).Stream(ctx, "KV_"+kv.WorkersBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("stream KV_%s has no leader: %v", kv.WorkersBucket, err)
	}
	leader := info.Cluster.Leader
	nats.shutdown(t, leader)
	t.Logf("shut down %s, leader of KV_%s", leader, kv.WorkersBucket)

	// Vending resumes, and every vendor renews its lease twice on the new
	// leader (each renewal records a new deadline in the clocks bucket).
	js := nats.js(t)
	for _, v := range vendors {
		id := v.waitServing()
		_, rev := recordedLast(t, js, id)
		eventually(t, 60*time.Second, "two lease renewals by "+v.name, func() bool {
			_, r := recordedLast(t, js, id)
			return r >= rev+2
		})
	}
	sf.waitOK(t, 50, 60*time.Second, "after the leader was shut down")
	seg.waitOK(t, 50, 60*time.Second, "after the leader was shut down")
	eventually(t, 60*time.Second, "every vendor ready (holding a lease)", func() bool {
		for _, v := range vendors {
			if !v.running() || !ready(v.httpAddr()) {
				return false
			}
		}
		return true
	})
	stopLoad()
	for _, v := range vendors {
		t.Logf("vendor %s: renewal failures logged %d, leases lost %d, claims %d",
			v.name, v.count("lease renewal failed"), v.count("lease lost"), v.count("worker ID claimed"))
	}
	sf.check(t)
	seg.check(t)
}

// TestFirstStartOnCluster starts three vendors at once on a fresh
// three-node cluster with LEAF_KV_REPLICAS=3, a few times: they create the
// replicated buckets and must all serve, not exit because a just-created
// stream has no leader yet ("kv: read last timestamp of worker ID N: nats:
// no responders available for request").
func TestFirstStartOnCluster(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	// The vendors' logs are dumped after a failure, last to first: say
	// what failed again after them, where a log's tail shows it.
	var failures []string
	t.Cleanup(func() {
		for _, f := range failures {
			t.Log("failed: " + f)
		}
	})
	for round := range 3 {
		nats := startNATSCluster(t, 3)
		// A short TTL: on a new cluster, worker IDs are vended with only a
		// TTL after their bucket was made.
		env := map[string]string{"LEAF_NATS_URL": nats.url(), "LEAF_KV_REPLICAS": "3", "LEAF_WORKER_LEASE_TTL": "3s"}
		var vs []*vendor
		for i := range 3 {
			v := newVendor(t, fmt.Sprintf("r%dv%d", round+1, i+1), env)
			v.start()
			vs = append(vs, v)
		}
		for _, v := range vs {
			if _, err := v.awaitLog(servingLine, 60*time.Second); err != nil {
				failures = append(failures, fmt.Sprintf("vendor %s, first start on a fresh cluster: %v\n%s", v.name, err, v.tail(3)))
				t.Error(failures[len(failures)-1])
			}
			v.kill()
		}
		for _, s := range nats.servers { // less load for the next round
			s.Shutdown()
		}
	}
}

// ready reports whether a vendor's /readyz answers 200.
func ready(addr string) bool {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
