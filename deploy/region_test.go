package deploy

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// docs/nats-server-region.conf is a node of a region's JetStream cluster,
// joined to the other regions by gateways, as docs/regions.md says: it
// parses as nats-server reads it, syncs JetStream writes, names its cluster
// and its gateway after the region, and lists the other region.
func TestRegionServerConfig(t *testing.T) {
	for k, v := range map[string]string{"NATS_SERVER_NAME": "east-1", "LEAF_VENDOR_PASSWORD": "x", "LEAF_CLIENT_PASSWORD": "x",
		"LEAF_ADMIN_PASSWORD": "x", "NATS_SYS_PASSWORD": "x"} {
		t.Setenv(k, v)
	}
	o, err := server.ProcessConfigFile(filepath.Join("..", "docs", "nats-server-region.conf"))
	if err != nil {
		t.Fatalf("docs/nats-server-region.conf: %v", err)
	}
	if !o.JetStream || !o.SyncAlways {
		t.Error("JetStream is not enabled with sync_interval: always")
	}
	if o.Cluster.Name != "east" || o.Gateway.Name != "east" {
		t.Errorf("cluster %q, gateway %q: a region's cluster and gateway are named after it", o.Cluster.Name, o.Gateway.Name)
	}
	names := map[string]bool{}
	for _, g := range o.Gateway.Gateways {
		names[g.Name] = len(g.URLs) > 0
	}
	if !names["west"] {
		t.Errorf("gateways %v: want region west, with its URLs", names)
	}
}
