// Package storedir looks after the directory of a vendor's embedded NATS
// server (LEAF_NATS_STORE_DIR), the one place where a vendor with no
// LEAF_NATS_URL keeps its tags, its segments' max_id and its worker-ID
// leases.
//
// That directory can be lost while the vendor runs (rm -rf leaf-data) or
// between runs, or put back from an older copy. A vendor that went on
// vending from what its server still holds in memory, or that started over
// on an empty store, would hand out IDs again. So:
//
//   - Record keeps, beside the directory (in <dir>.record, which deleting
//     the directory leaves alone), how far each segment tag was handed
//     out, written durably before the IDs may be served. It is a
//     segment.Marks, combined with the store's own marks
//     (segment.AllMarks), so a fresh or older store is raised above it.
//     (Snowflake needs no record: a fresh store's worker IDs wait past
//     this host's clock, kv.SeedClocks.) Its lock keeps a second vendor
//     off the directory even once the directory itself, and the lock in
//     it, is gone.
//   - Watch looks at the directory every WatchEvery and tells (Err) when
//     it is gone, replaced, or its server's JetStream has stopped: the
//     vendor then answers 503 and is not ready, saying what to do, rather
//     than vend from a store no one can read back. A record deleted too
//     (rm -rf leaf-data*) it writes again from memory, so that the restart
//     it asks for still starts above what was handed out.
//
// The record is one small JSON file, replaced whole on each change: written
// to a temporary file, synced, renamed over the old one, and the directory
// synced, so that a crash leaves the old record or the new one, never a mix.
// A record that does not decode is refused with what to do, never read as
// empty.
package storedir
