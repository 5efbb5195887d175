// Package kv keeps leaf-nats state in NATS JetStream key-value buckets: the
// snowflake worker-ID leases and, when no Postgres is configured, the segment
// table.
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
package kv
