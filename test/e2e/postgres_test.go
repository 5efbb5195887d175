package e2e

import (
	"testing"
	"time"

	"github.com/leaf-nats/leaf/internal/pgtest"
)

// TestPostgresOutage stops Postgres for 15s under segment load. Vending
// goes on from the buffers while they last, then every request gets a 503
// (none hangs past its timeout), and vending recovers after the restart.
func TestPostgresOutage(t *testing.T) {
	pg := pgtest.StartServer(t)
	nats := startNATS(t)
	env := map[string]string{"LEAF_NATS_URL": nats.url(), "LEAF_POSTGRES_URL": pg.DSN()}
	// A large step, so the buffers hold IDs for a while after the stop.
	vendorCommand(t, env, "tags", "add", "e2e", "-step", "100000")
	startVendors(t, "v", 2, env)

	tl := newTally("postgres outage")
	// The timeout is well above the vendor's own bound on a segment wait
	// (500ms): a timeout means a request hung.
	d := startLoad(t, nats.conn(t), tl, loadSpec{subject: "leaf.segment.e2e", batch: 100, clients: 3, timeout: 8 * time.Second, pace: 20 * time.Millisecond})
	tl.waitIDs(t, 20_000, 30*time.Second)

	_, okAtStop := tl.counts()
	pg.Stop()
	stopped := time.Now()
	eventually(t, 60*time.Second, "503s once the buffers are empty", func() bool { return tl.errCount("503") > 0 })
	_, okAt503 := tl.counts()
	outage := scaled(15 * time.Second)
	<-time.After(time.Until(stopped.Add(outage))) // the fault's length, not a synchronisation
	pg.Start()
	tl.waitOK(t, 50, 60*time.Second, "after Postgres restarted")
	d.stop()

	if n := tl.errCount("timeout"); n > 0 {
		t.Errorf("%d requests got no answer within 8s while Postgres was down", n)
	}
	t.Logf("replies with IDs from the buffers after the stop began, before the first 503: %d; 503 message: %s", okAt503-okAtStop, tl.sample("503"))
	tl.check(t)
}
