package kv

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Names are the buckets a vendor keeps its state in. With no region they
// are the plain names (WorkersBucket, ...). A region (LEAF_REGION) keeps
// its own: one NATS cluster of a supercluster shares one JetStream with
// the others, whose stream names are global, so a region's buckets carry
// its name ("leaf_workers_east") and are placed in its own NATS cluster,
// so that it claims worker IDs and allocates segments with nothing from
// another region, through a partition too.
type Names struct {
	Workers, Clocks, Cluster, Segments, Leaders, Marks string
	// Placement puts the buckets a vendor creates in its region's NATS
	// cluster; nil leaves it to the server.
	Placement *jetstream.Placement
}

// SegmentBucket holds the KV segment store's rows (package
// segment/kvstore): key = tag, value = the row as JSON.
const SegmentBucket = "leaf_segments"

// PlainNames are the buckets of a vendor with no region.
func PlainNames() Names {
	return Names{Workers: WorkersBucket, Clocks: ClocksBucket, Cluster: ClusterBucket,
		Segments: SegmentBucket, Leaders: LeadersBucket, Marks: MarksBucket}
}

// RegionNames are the buckets of region, placed in the NATS cluster named
// cluster ("" leaves placement to the server: a single server).
func RegionNames(region, cluster string) Names {
	n := PlainNames()
	for _, b := range []*string{&n.Workers, &n.Clocks, &n.Cluster, &n.Segments, &n.Leaders, &n.Marks} {
		*b += "_" + region
	}
	if cluster != "" {
		n.Placement = &jetstream.Placement{Cluster: cluster}
	}
	return n
}

// NamesOf are the buckets of the region a contract names ("<name>/<id>",
// "" for none), for messages that name them.
func NamesOf(region string) Names {
	if name, _, ok := strings.Cut(region, "/"); ok {
		return RegionNames(name, "")
	}
	return PlainNames()
}

// JS is a JetStream and the names of a vendor's buckets in it: what every
// call of this package that opens a bucket takes.
type JS struct {
	jetstream.JetStream
	Names
}

// Plain is js with the plain bucket names.
func Plain(js jetstream.JetStream) JS { return JS{JetStream: js, Names: PlainNames()} }

// streamOf names the stream of bucket.
func streamOf(bucket string) string { return "KV_" + bucket }
