// Package kv keeps leaf-nats state in NATS JetStream key-value buckets:
//
//	leaf_cluster         the cluster contract (Contracts): what vendors must agree on
//	leaf_workers         snowflake worker-ID leases (Claim, Lease), one key per held ID
//	leaf_worker_clocks   each worker ID's last timestamp, kept past its lease
//	leaf_strict_leaders  the leader of each strict tag (Leaders, Lead)
//	leaf_segments        the segment table when no Postgres is configured (its store: segment/kvstore)
//
// Every record read back is decoded and checked in one place (records.go)
// before it is believed: one that does not parse, or holds values no vendor
// writes, is a *CorruptError naming the key, its revision, what it holds
// and the fix, never a zero value.
//
// # Worker-ID leases
//
// Bucket leaf_workers has one key per held worker ID ("worker.<id>") and a
// bucket TTL. Claim takes a free ID with Create (which fails if the key
// exists, so two claimants never share an ID); Renew updates the key against
// its last revision, which resets the TTL; a holder that stops renewing loses
// the key to the TTL and its ID becomes free. Release deletes the key at once.
//
// A lease alone would let a new holder repeat IDs: the old one may have used
// timestamps ahead of the new one's clock. So bucket leaf_worker_clocks (no
// TTL) records, per worker ID, the last millisecond its holder may use. Every
// renewal first extends the lease, then records its new deadline there (with
// compare-and-set), and only then lets the generator vend up to it. A new
// holder waits until its clock is past the recorded millisecond before it
// vends. The deadline is measured from before the renewal was sent, so it
// falls before the server can expire the key: the old holder has stopped
// before anyone else can claim its ID.
//
// Buckets whose revisions are held for compare-and-set are created with
// revisions that start at the time of creation (openOrCreateSequenced), so
// that a revision remembered from a bucket that was lost never matches one
// of a bucket created again. Workers and ResetWorker let an operator see
// and repair the records of every worker ID.
//
// A worker ID's lease key and a strict tag's lead key are one primitive, a
// fenced key (fenced.go): claimed with Create, renewed after checking that
// it still holds this claim's random token at a revision the claim wrote
// (a store that went back issues its revisions again), with a deadline
// measured on the injected clock from before the renewal was sent, less a
// margin; lost when it is gone or another's; released by a delete at its
// revision. lease.Machine runs it for both.
//
// # Strict leaders
//
// A strict tag's leader holds a Lead in leaf_strict_leaders: a fenced key
// like a worker ID's lease, with no timestamp to record.
package kv
