// Package workerid holds a snowflake worker ID for one vendor and publishes
// the generator that vends with it.
//
// A Keeper is the one owner of that job. Open starts its loop, which claims
// a worker ID, renews the hold, and claims a new one when the hold is lost;
// Close stops vending, releases the worker ID and waits for the loop. The
// loop is a lease.Driver running the lease machine that strict tags' leads
// run too (with Reclaim: a lost worker ID is claimed again); the Keeper
// supplies the claim and the generator each renewal opens to its deadline.
// The Keeper's NextN is what the service vends from: it answers ErrNoLease
// (a 503) whenever no worker ID is held.
//
// # Holders
//
// The Keeper consumes the Holder interface, which it declares: a hold on
// one worker ID that can be renewed and released. kv.Lease (a JetStream KV
// lease) is the implementation in production; FileHolder keeps a statically
// configured worker ID's last timestamp in a local file (Leaf's local mode),
// and a static ID is held through both at once.
//
// # Why IDs never repeat
//
// Uniqueness rests on two rules the Holder and the Keeper share:
//
//   - Renew durably records, before it returns, a last timestamp at or after
//     every millisecond the generator may use until the deadline it
//     returns; the Keeper opens the generator's window only up to that
//     deadline (snowflake.Generator.Window). A holder that cannot renew
//     stops vending at its deadline by itself.
//   - A new holder starts strictly after the last timestamp recorded for
//     its worker ID (Holder.Last, the generator's Settings.Last).
//
// So when a worker ID passes from one process to another, the second starts
// after every ID the first can have made.
package workerid
