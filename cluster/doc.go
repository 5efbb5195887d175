// Package cluster holds a vendor to what the vendors sharing NATS must
// agree on for IDs to be unique, and checks the vendors it can see.
//
// # The contract
//
// The snowflake epoch and layout, the worker IDs the cluster claims and
// the segment store that serves the segment subjects are the Terms. The
// first vendor records them in KV bucket leaf_cluster (kv.Contracts); every
// vendor checks them before it claims or serves and every CheckEvery after.
// A vendor whose terms differ ends with a *MismatchError naming each term,
// both values and the setting to change. A contract that is missing (a
// wiped NATS store) or corrupt is recorded again, unless vendors that are
// serving run with other terms: then one side is misconfigured, and a
// vendor that keeps finding none after OtherJetStreamAfter concludes that
// those vendors keep theirs in another JetStream.
//
// # The peers
//
// Every vendor answers the others on PeersSubject with a Peer: its clock,
// its terms, the worker ID it holds and where, and nothing that grows with
// its tags. They serve three checks:
//
//   - Before a worker-ID claim (Guard.Claim), this clock must be within
//     LEAF_CLOCK_MAX_SKEW of the median of the NATS server's and the
//     peers' (CheckClocks), which Leaf's design describes and Leaf never
//     shipped; how far they are ahead bounds the wait after lost state.
//   - No live vendor may vend with the worker ID this one holds or just
//     claimed (VendingWith): one that holds it in the same bucket got it
//     from a store that went back, one elsewhere is in another JetStream.
//   - No live vendor may serve the segment subjects from another store.
//
// A vendor that holds a worker ID renews its lease; one that does not
// answer for longer than a lease TTL is alive and unseen, and the Guard
// says so (Status.Blind): the checks above miss it.
//
// # Core and Guard
//
// The decisions are a pure function of what was observed, as etcd's raft
// is: the Core is stepped with an Observation (the contract, the store's
// identity, the peers, the worker ID held, the time) and returns a
// Decision (a contract to write, a disagreement that ends the vendor, the
// gates that refuse requests, lines to log). It does no I/O and reads no
// clock, so tests step it through every case. The Guard is the thin loop
// around it: it observes, steps, writes, logs, answers the peers, and runs
// the claims.
package cluster
