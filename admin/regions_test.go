package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/kv"
)

func peerOf(instance, region string) cluster.Peer {
	return cluster.Peer{V: 1, Instance: instance, Now: time.Now().UTC(), Terms: cluster.Terms{Epoch: 1, Layout: "1+41+10+12", WorkerIDs: "0-127", Region: region}}
}

// The regions are gathered from the environment's own, the vendors that
// answered and the contract buckets listed; a region with two numbers and
// two regions with one are said.
func TestRegionsOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		s        sighting
		want     []Region
		problems int
	}{
		{"no regions", sighting{peers: []cluster.Peer{peerOf("a", "")}}, []Region{}, 0},
		{"own only", sighting{own: "east/0"}, []Region{{Name: "east", IDs: []string{"0"}, Own: true}}, 0},
		{
			"a supercluster",
			sighting{
				own:       "east/0",
				peers:     []cluster.Peer{peerOf("w2", "west/1"), peerOf("e1", "east/0"), peerOf("w1", "west/1"), peerOf("p", "")},
				contracts: map[string]string{"east": "east/0", "west": "west/1", "north": ""},
			},
			[]Region{
				{Name: "east", IDs: []string{"0"}, Vendors: []string{"e1"}, Own: true, Contract: true, Listed: true},
				{Name: "west", IDs: []string{"1"}, Vendors: []string{"w1", "w2"}, Contract: true, Listed: true},
				{Name: "north", Listed: true},
			},
			0,
		},
		{
			"misconfigured",
			sighting{own: "east/0", peers: []cluster.Peer{peerOf("w1", "west/0"), peerOf("e2", "east/2")}},
			[]Region{
				{Name: "east", IDs: []string{"0", "2"}, Vendors: []string{"e2"}, Own: true},
				{Name: "west", IDs: []string{"0"}, Vendors: []string{"w1"}},
			},
			2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := regionsOf(tc.s)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("regions\n%+v\nwant\n%+v", got, tc.want)
			}
			if p := regionProblems(got); len(p) != tc.problems {
				t.Fatalf("problems %q, want %d", p, tc.problems)
			}
			for _, r := range got {
				if r.Reachable() != (r.Own || r.Contract || len(r.Vendors) > 0) || r.Name == "north" && r.Reachable() {
					t.Fatalf("region %s reachable: %v", r.Name, r.Reachable())
				}
			}
		})
	}
}

// vendor cluster show lists, on a real NATS, the regions whose vendors
// answer and whose buckets are there: east (this environment's), west
// (two vendors answering, its contract), and north (a bucket nothing
// answers for).
func TestRegionsShown(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	js := natstest.JetStream(t, s)
	ctx := context.Background()
	for _, r := range []string{"east/0", "west/1"} {
		name, _, _ := strings.Cut(r, "/")
		cs, err := kv.OpenContracts(ctx, kv.JS{JetStream: js, Names: kv.RegionNames(name, "")}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := cs.Record(ctx, kv.Contract{Epoch: 1, Layout: "1+41+10+12", WorkerIDs: "0-127", Region: r, By: "test", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// north's bucket is there, with no contract in it.
	if _, err := kv.OpenContracts(ctx, kv.JS{JetStream: js, Names: kv.RegionNames("north", "")}, 1); err != nil {
		t.Fatal(err)
	}
	for _, p := range []cluster.Peer{peerOf("west-a", "west/1"), peerOf("west-b", "west/1"), peerOf("east-a", "east/0")} {
		data, _ := json.Marshal(p)
		sub, err := nc.Subscribe(cluster.PeersSubject("leaf"), func(m *nats.Msg) { m.Respond(data) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
	}
	a, err := Open(Env{NATSURL: s.ClientURL(), Region: "east", Terms: cluster.Terms{Region: "east/0"}, Prefix: "leaf", Self: "admin"}, false, func(error) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var out bytes.Buffer
	if err := a.Regions(ctx, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	for i, want := range []string{
		"regions:",
		"REGION  ID  VENDORS",
		"east    0   1: east-a",
		"west    1   2: west-a, west-b",
		"north   -   0",
	} {
		if i >= len(lines) || !strings.Contains(lines[i], want) {
			t.Fatalf("line %d: want %q in:\n%s", i, want, out.String())
		}
	}
	for _, want := range []string{"this environment's region", "yes (its vendors answer)", "no (its bucket leaf_cluster_north is listed"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("want %q in:\n%s", want, out.String())
		}
	}
}
