package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leaf-nats/leaf/cluster"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/snowflake"
)

// regionsWait is how long vendor cluster show waits for the vendors'
// answers: every vendor answers at once, across a gateway in milliseconds.
const regionsWait = time.Second

// Region is one region as vendor cluster show lists it.
type Region struct {
	Name string
	// IDs are the LEAF_REGION_IDs the sightings give it: one, or none
	// when nothing seen says; more than one is a misconfiguration.
	IDs []string
	// Vendors are the instances of the region that answered.
	Vendors []string
	// Own: this environment's region. Contract: the contract in its
	// bucket was read now. Listed: its bucket is in the JetStream's
	// listing, whether or not it answered.
	Own, Contract, Listed bool
}

// Reachable reports whether the region answers from here now: its
// vendors, or its state across the gateways.
func (r Region) Reachable() bool { return r.Own || len(r.Vendors) > 0 || r.Contract }

// sighting is what vendor cluster show saw of the regions: the
// environment's own region ("name/id", "" for none), the vendors that
// answered on the peers' exchange (or why none could be asked), and the
// region buckets of the supercluster's JetStream (or why they could not
// be listed).
type sighting struct {
	own      string
	peers    []cluster.Peer
	peersErr error
	// contracts are the regions of the contract buckets listed, by region
	// name: the contract's region ("name/id"), "" when it was not read.
	contracts map[string]string
	listErr   error
}

// regionsOf gathers the regions of s, by ID and then name. Vendors with no
// region are left out (the caller counts them).
func regionsOf(s sighting) []Region {
	byName := map[string]*Region{}
	get := func(name string) *Region {
		if byName[name] == nil {
			byName[name] = &Region{Name: name}
		}
		return byName[name]
	}
	addID := func(r *Region, id string) {
		if id != "" && !slices.Contains(r.IDs, id) {
			r.IDs = append(r.IDs, id)
		}
	}
	if name, id, ok := strings.Cut(s.own, "/"); ok {
		r := get(name)
		r.Own = true
		addID(r, id)
	}
	for _, p := range s.peers {
		if name, id, ok := strings.Cut(p.Terms.Region, "/"); ok {
			r := get(name)
			r.Vendors = append(r.Vendors, p.Instance)
			addID(r, id)
		}
	}
	for name, region := range s.contracts {
		r := get(name)
		r.Listed = true
		if rname, id, ok := strings.Cut(region, "/"); ok && rname == name {
			r.Contract = true
			addID(r, id)
		}
	}
	out := make([]Region, 0, len(byName))
	for _, r := range byName {
		slices.Sort(r.IDs)
		slices.Sort(r.Vendors)
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Region) int { return cmp.Or(cmp.Compare(firstID(a), firstID(b)), cmp.Compare(a.Name, b.Name)) })
	return out
}

// firstID orders regions by number, those with none last.
func firstID(r Region) int {
	if len(r.IDs) > 0 {
		if n, err := strconv.Atoi(r.IDs[0]); err == nil {
			return n
		}
	}
	return math.MaxInt
}

// regionProblems says what the regions seen get wrong: a region with two
// numbers, two regions with one.
func regionProblems(rs []Region) []string {
	var out []string
	byID := map[string][]string{}
	for _, r := range rs {
		if len(r.IDs) > 1 {
			out = append(out, fmt.Sprintf("region %s is seen with LEAF_REGION_ID %s: a region has one number; set the same on every vendor of region %s",
				r.Name, strings.Join(r.IDs, " and "), r.Name))
		}
		for _, id := range r.IDs {
			byID[id] = append(byID[id], r.Name)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		if names := byID[id]; len(names) > 1 {
			out = append(out, fmt.Sprintf("regions %s all have LEAF_REGION_ID %s: two regions with one number hand out the same IDs; give each region its own",
				strings.Join(names, ", "), id))
		}
	}
	return out
}

// Regions prints the regions seen from this environment: its own, those
// whose vendors answer across the supercluster's gateways, and those whose
// buckets its JetStream lists; each with its number, its vendors, and
// whether it answers from here now.
func (a *Admin) Regions(ctx context.Context, w io.Writer) error {
	s := a.sight(ctx)
	rs := regionsOf(s)
	plain := 0
	for _, p := range s.peers {
		if p.Terms.Region == "" {
			plain++
		}
	}
	if len(rs) == 0 {
		fmt.Fprintf(w, "regions: none (LEAF_REGION is unset, and none of the %d vendors that answered names one)\n", plain)
		return nil
	}
	fmt.Fprintln(w, "regions:")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  REGION\tID\tVENDORS\tREACHABLE")
	for _, r := range rs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.Name, cmp.Or(strings.Join(r.IDs, ","), "-"), vendorList(r.Vendors), reach(r))
	}
	tw.Flush()
	for _, p := range regionProblems(rs) {
		fmt.Fprintln(w, p)
	}
	if plain > 0 {
		fmt.Fprintf(w, "%d vendor(s) that answered have no region (LEAF_REGION unset): they hand out region 0's IDs\n", plain)
	}
	if s.peersErr != nil {
		fmt.Fprintf(w, "the vendors could not be asked (%v): the vendors listed are none\n", s.peersErr)
	}
	if s.listErr != nil {
		fmt.Fprintf(w, "the supercluster's buckets could not be listed (%v): JetStream lists them only with a meta leader, which a partitioned supercluster may lack; "+
			"a region that does not answer from here now is not listed\n",
			s.listErr)
	}
	return nil
}

func vendorList(vs []string) string {
	if len(vs) == 0 {
		return "0"
	}
	return fmt.Sprintf("%d: %s", len(vs), strings.Join(vs, ", "))
}

// reach says whether r answers from here now, and how that was seen.
func reach(r Region) string {
	switch {
	case r.Own:
		return "yes (this environment's region)"
	case len(r.Vendors) > 0:
		return "yes (its vendors answer)"
	case r.Contract:
		return "yes (its contract answers; no vendor of it does)"
	}
	return fmt.Sprintf("no (its bucket %s is listed, but no contract in it could be read, and no vendor of it answers: cut off from here, or down)", kv.RegionNames(r.Name, "").Cluster)
}

// sight asks the vendors about themselves and reads the region buckets'
// contracts.
func (a *Admin) sight(ctx context.Context) sighting {
	s := sighting{own: a.env.Terms.Region, contracts: map[string]string{}}
	if a.env.Prefix != "" {
		ask := cluster.NewAsker(a.nc, a.env.Prefix, a.env.Self, slog.New(slog.DiscardHandler))
		replies, err := ask.Ask(ctx, regionsWait, regionsWait, 1<<30, snowflake.SystemClock{})
		for _, r := range replies {
			s.peers = append(s.peers, r.Peer)
		}
		s.peersErr = err
	}
	names, err := a.regionBuckets(ctx)
	s.listErr = err
	for _, name := range names {
		s.contracts[name] = a.regionOf(ctx, name)
	}
	return s
}

// regionBuckets lists the regions whose contract buckets
// (leaf_cluster_<region>) the JetStream holds.
func (a *Admin) regionBuckets(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	prefix := "KV_" + kv.ClusterBucket + "_"
	lister := a.js.StreamNames(ctx)
	var names []string
	for n := range lister.Name() {
		if name, ok := strings.CutPrefix(n, prefix); ok {
			names = append(names, name)
		}
	}
	if err := lister.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return names, err
	}
	return names, nil
}

// regionOf reads the region recorded in region name's contract: "" when
// it does not answer.
func (a *Admin) regionOf(ctx context.Context, name string) string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	rec, err := kv.ReadContract(ctx, kv.JS{JetStream: a.js.JetStream, Names: kv.RegionNames(name, "")})
	if err != nil {
		return ""
	}
	return rec.Region
}
