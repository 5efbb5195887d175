package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/vending"
)

// Regions (issue 29): two NATS clusters, east and west (one server each),
// joined by gateways, or not at all; two vendors in each, with their own
// state; load in both. The gateways run through proxies the test cuts.

// gwProxy relays TCP connections to a gateway port until cut: then it
// closes every connection and refuses new ones, as a partition between
// the regions does, until healed.
type gwProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startProxy(t testing.TB, target string) *gwProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &gwProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() { ln.Close(); p.setCut(true); p.wg.Wait() })
	return p
}

func (p *gwProxy) addr() string { return p.ln.Addr().String() }

func (p *gwProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Go(func() { io.Copy(up, c); up.Close() })
		p.wg.Go(func() { io.Copy(c, up); c.Close() })
	}
}

// setCut cuts (closing every connection) or heals the link.
func (p *gwProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// region is one region's NATS server and the settings of its vendors.
type region struct {
	name string
	id   int
	srv  *server.Server
	gw   *gwProxy // in front of its gateway port
	env  map[string]string
}

// startRegions starts a one-server NATS cluster with JetStream per name,
// joined by gateways through proxies when linked, and waits until
// JetStream answers in each.
func startRegions(t testing.TB, linked bool, names ...string) []*region {
	t.Helper()
	rs := make([]*region, len(names))
	gwPorts := map[string]int{}
	for i, name := range names {
		rs[i] = &region{name: name, id: i}
		gwPorts[name] = natstest.FreePort(t)
		if linked {
			rs[i].gw = startProxy(t, "127.0.0.1:"+strconv.Itoa(gwPorts[name]))
		}
	}
	for _, r := range rs {
		c := natsserver.Config{Name: "n-" + r.name}
		if linked {
			// A cluster of one (JetStream in a supercluster needs a
			// cluster, with routes), joined to the others by gateways.
			route := natstest.FreePort(t)
			c.ClusterName, c.Cluster = r.name, "127.0.0.1:"+strconv.Itoa(route)
			c.Routes = []string{"nats://127.0.0.1:" + strconv.Itoa(route)}
			c.Configure = func(o *server.Options) { gatewayOptions(o, r, rs, gwPorts[r.name]) }
		}
		r.srv = natstest.ServerWith(t, c)
		r.env = map[string]string{"LEAF_NATS_URL": r.srv.ClientURL(), "LEAF_REGION": r.name, "LEAF_REGION_ID": strconv.Itoa(r.id)}
	}
	for _, r := range rs {
		js := natstest.JetStream(t, r.srv)
		eventually(t, 60*time.Second, "JetStream in region "+r.name, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := js.AccountInfo(ctx)
			return err == nil
		})
	}
	return rs
}

// gatewayOptions joins r to the other regions by gateways, every link
// through the proxies, which r advertises as its own gateway address.
func gatewayOptions(o *server.Options, r *region, all []*region, port int) {
	o.Gateway.Name, o.Gateway.Host, o.Gateway.Port = r.name, "127.0.0.1", port
	o.Gateway.Advertise = r.gw.addr()
	for _, other := range all {
		if other == r {
			continue
		}
		u, _ := url.Parse("nats://" + other.gw.addr())
		o.Gateway.Gateways = append(o.Gateway.Gateways, &server.RemoteGatewayOpts{Name: other.name, URLs: []*url.URL{u}})
	}
}

// cut cuts (or heals) every link between the regions.
func cutRegions(rs []*region, cut bool) {
	for _, r := range rs {
		r.gw.setCut(cut)
	}
}

// regionLoad is the load of one region: its clients on its own NATS.
type regionLoad struct {
	sf, seg, strict *tally
	stop            func()
}

func startRegionLoad(t testing.TB, r *region) *regionLoad {
	nc := natstest.Conn(t, r.srv)
	spec := loadSpec{batch: 1, clients: 2, timeout: 2 * time.Second, pace: 20 * time.Millisecond}
	l := &regionLoad{sf: newTally(r.name + " snowflake"), seg: newTally(r.name + " segment"), strict: newTally(r.name + " strict")}
	spec.subject = "leaf.snowflake"
	d1 := startLoad(t, nc, l.sf, spec)
	spec.subject = "leaf.segment.e2e"
	d2 := startLoad(t, nc, l.seg, spec)
	spec.subject, spec.clients = "leaf.segment.ledger", 1
	d3 := startLoad(t, nc, l.strict, spec)
	l.stop = func() { d1.stop(); d2.stop(); d3.stop() }
	return l
}

// errorShare is the share of a tally's requests answered with an error.
func errorShare(tl *tally) (errs int, share float64) {
	_, ok := tl.counts()
	tl.mu.Lock()
	for _, n := range tl.errs {
		errs += n
	}
	tl.mu.Unlock()
	if ok+errs == 0 {
		return 0, 0
	}
	return errs, float64(errs) / float64(ok+errs)
}

// addRegionTags adds tag e2e (normal) and ledger (strict, home east) in
// every region's store, each in its region's block.
func addRegionTags(t testing.TB, rs []*region) {
	t.Helper()
	for _, r := range rs {
		for _, args := range [][]string{{"tags", "add", "e2e", "-step", "50"}, {"tags", "add", "ledger", "-step", "50", "-strict", "-home", rs[0].name}} {
			if code, out := runVendor(t, r.env, args...); code != 0 {
				t.Fatalf("region %s: vendor %v: exit %d\n%s", r.name, args, code, out)
			}
		}
	}
}

// TestRegionsThroughAPartition: the gateways between east and west are cut
// for longer than a lease TTL under load in both regions, and a west vendor
// is restarted during the cut. Both regions serve both modes throughout,
// no ID repeats across them, a strict tag (home east) answers west 503
// naming east during the cut, and everything is back after the heal.
func TestRegionsThroughAPartition(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	rs := startRegions(t, true, "east", "west")
	addRegionTags(t, rs)
	var vendors []*vendor
	for _, r := range rs {
		vendors = append(vendors, startVendors(t, r.name+"-", 2, r.env)...)
	}
	loads := []*regionLoad{startRegionLoad(t, rs[0]), startRegionLoad(t, rs[1])}
	loads[1].strict.waitOK(t, 20, 60*time.Second, "west's strict requests, served by east's leader")
	before := loads[1].strict.errCount("503")

	cutRegions(rs, true)
	cut := scaled(12 * time.Second) // four lease TTLs
	time.Sleep(cut / 2)
	w := vendors[3] // a west vendor restarted during the cut serves
	w.kill()
	w.start()
	w.waitServing()
	mid, atMid := time.Now(), loads[1].strict.errCount("503")
	// vendor cluster show in east lists east and its two vendors, and no
	// west that answers.
	eastView := showRegions(t, rs[0])
	time.Sleep(cut/2 - time.Since(mid))
	// A 503 since the restart that names the home region, not only the
	// last one as the cut ends (on a busy machine that may be another's,
	// such as the restarted vendor's own start): the cut lasts until one
	// comes.
	homeNamed := within(30*time.Second, func() bool {
		return loads[1].strict.errCount("503") > atMid && strings.Contains(loads[1].strict.last("503"), "home region east")
	})
	during := loads[1].strict.errCount("503") - before
	cutRegions(rs, false)
	healed := time.Now()
	okBefore, _ := loads[1].strict.counts()
	eventually(t, 60*time.Second, "west's strict tag served again after the heal", func() bool {
		n, _ := loads[1].strict.counts()
		return n > okBefore
	})
	back := time.Since(healed)
	time.Sleep(2 * time.Second)
	for _, l := range loads {
		l.stop()
	}
	checkShown(t, "east during the cut", eastView, map[string]string{"east": "2: "}, "west")
	checkShown(t, "west after the heal", showRegions(t, rs[1]), map[string]string{"east": "2: ", "west": "2: "}, "")
	reportRegions(t, "supercluster, gateways cut "+cut.String(), loads)
	report(t, "regions: west's strict tag (home east): %d 503s during the cut (naming east: %v), served again %v after the heal", during, homeNamed, back.Round(100*time.Millisecond))
	checkRegionIDs(t, loads)
	checkRegionErrors(t, loads)
	if during == 0 || !homeNamed {
		t.Errorf("west's requests for the strict tag got %d 503s during the cut (naming east: %v), want some, naming the home region", during, homeNamed)
	}
}

// TestRegionsThatNeverTalk: two deployments with no link at all, one region
// each, serve the same tag and snowflake IDs: no ID repeats, since each
// region's IDs are its own, and each decodes the other's IDs to its region.
func TestRegionsThatNeverTalk(t *testing.T) {
	t.Parallel() // mostly waiting, and checks no latency, CPU or memory (doc.go)
	rs := startRegions(t, false, "east", "west")
	addRegionTags(t, rs)
	for _, r := range rs {
		startVendors(t, r.name+"-", 2, r.env)
	}
	loads := []*regionLoad{startRegionLoad(t, rs[0]), startRegionLoad(t, rs[1])}
	for _, l := range loads {
		l.sf.waitOK(t, 200, 60*time.Second, "snowflake IDs")
		l.seg.waitOK(t, 200, 60*time.Second, "segment IDs")
	}
	for _, l := range loads {
		l.stop()
	}
	reportRegions(t, "two deployments, never linked", loads)
	checkRegionIDs(t, loads)
	checkRegionErrors(t, loads)
	westIDs := loads[1].seg.snapshotIDs()
	if block, _ := segment.RegionBlock(1); len(westIDs) == 0 || westIDs[0] < block.First {
		t.Fatalf("west's segment IDs start at %v, want in its block from %d", westIDs[:min(1, len(westIDs))], block.First)
	}
	sf := loads[1].sf.snapshotIDs()
	var d vending.Decoded
	msg, err := natstest.Conn(t, rs[0].srv).Request("leaf.snowflake.decode", []byte(strconv.FormatInt(sf[0], 10)), 5*time.Second)
	if err != nil || msg.Header.Get(micro.ErrorCodeHeader) != "" || json.Unmarshal(msg.Data, &d) != nil || d.RegionID == nil || *d.RegionID != 1 {
		t.Fatalf("east decoding west's ID %d: %v %s, want region_id 1", sf[0], err, msgData(msg))
	}
}

// showRegions runs vendor cluster show in region r and returns the rows
// of its regions table, by region.
func showRegions(t testing.TB, r *region) map[string]string {
	t.Helper()
	code, out := runVendor(t, r.env, "cluster", "show")
	if code != 0 {
		t.Fatalf("vendor cluster show in region %s: exit %d\n%s", r.name, code, out)
	}
	rows := map[string]string{"": out}
	_, table, _ := strings.Cut(out, "\nregions:\n")
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(line, "  ") && f[0] != "REGION" {
			rows[f[0]] = line
		}
	}
	return rows
}

// checkShown checks that the regions table lists each region of want as
// reachable with the vendors want says, and unreachable as not reachable
// (absent, or "no").
func checkShown(t testing.TB, what string, rows, want map[string]string, unreachable string) {
	t.Helper()
	for name, vendors := range want {
		if row := rows[name]; !strings.Contains(row, vendors) || !strings.Contains(row, "yes (") {
			t.Errorf("vendor cluster show, %s: region %s's row %q, want it reachable with %s vendors\n%s", what, name, row, vendors, rows[""])
		}
	}
	if row, ok := rows[unreachable]; unreachable != "" && ok && !strings.Contains(row, "no (") {
		t.Errorf("vendor cluster show, %s: region %s's row %q, want it not reachable\n%s", what, unreachable, row, rows[""])
	}
}

func msgData(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return string(m.Data)
}

// reportRegions reports each region's requests and errors per mode.
func reportRegions(t testing.TB, scenario string, loads []*regionLoad) {
	t.Helper()
	var parts []string
	for _, l := range loads {
		for _, tl := range []*tally{l.sf, l.seg, l.strict} {
			ok, _ := tl.counts()
			errs, share := errorShare(tl)
			parts = append(parts, fmt.Sprintf("%s: %d ok, %d errors (%.2f%%)", tl.name, ok, errs, 100*share))
		}
	}
	report(t, "regions, %s: %s", scenario, strings.Join(parts, "; "))
}

// checkRegionIDs checks that no ID of a mode repeats across the regions:
// snowflake IDs, and each tag's.
func checkRegionIDs(t testing.TB, loads []*regionLoad) {
	t.Helper()
	loads[0].sf.check(t, loads[1].sf)
	loads[0].seg.check(t, loads[1].seg)
	loads[0].strict.check(t, loads[1].strict)
}

// checkRegionErrors fails the test when a region's snowflake or normal
// segment requests failed more than now and then: each region must serve
// on its own.
func checkRegionErrors(t testing.TB, loads []*regionLoad) {
	t.Helper()
	for _, l := range loads {
		for _, tl := range []*tally{l.sf, l.seg} {
			if errs, share := errorShare(tl); share > 0.05 {
				tl.mu.Lock()
				by := formatErrs(tl.errs)
				tl.mu.Unlock()
				t.Errorf("%s: %d errors, %.1f%% of its requests %s, want a region to serve on its own", tl.name, errs, 100*share, by)
			}
		}
	}
}
