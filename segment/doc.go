// Package segment vends IDs the way Leaf-segment does: each business tag
// has a row in a Store holding max_id, and an allocator claims ranges
// ("segments") of it by advancing max_id atomically, then hands out the
// range from memory. IDs are unique across every process sharing the store
// and ascending within one process; they are not dense (a stopped process
// loses the rest of its segments).
//
// # Serving
//
// An Allocator keeps two segments per tag. Once 10% of the current one is
// used it loads the next in the background, so the switch does not wait on
// the store. Take and TryTake hand out n IDs in one call, across a switch
// when needed:
//
//	a, err := segment.Open(ctx, segment.Options{Store: store})
//	...
//	defer a.Close()
//	ids, err := a.Take(ctx, "order", nil, 3) // e.g. [1 2 3]
//
// TryTake never waits for the store; it is the inline fast path of a
// request handler, which falls back to Take in a goroutine when it returns
// ok == false. A Take that finds both buffers empty waits for the load up to
// Options.Wait, then fails with an error wrapping ErrUnavailable: a request
// never hangs on a store that is down, and while the store is down vending
// continues from whatever the buffers hold.
//
// # Step
//
// A segment's size starts at the row's step. Each later load doubles it
// when the last segment lasted under 15 minutes (up to Options.MaxStep),
// keeps it under 30 and halves it beyond, never below the row's step.
//
// # Tags
//
// The allocator caches the tag list, re-read every Options.Refresh. A
// request for a tag outside the cache re-reads the list once, shared by
// every concurrent request, and a list younger than Options.NegativeTTL is
// trusted to say a tag does not exist, so a flood of unknown tags costs the
// store at most one call per NegativeTTL. ValidateTag fixes what a tag may
// be: tags are NATS subject tokens.
//
// # Rate
//
// Options.RateLimit bounds how many IDs of one tag the allocator hands out a
// second (up to Options.RateBurst at once), on every path: a take beyond it
// fails with ErrRateLimited, so that no requester can use a tag's ID space
// up.
//
// # Errors
//
// Errors wrap the sentinels ErrInvalidTag, ErrInvalidStep, ErrUnknownTag,
// ErrTagExists, ErrRateLimited, ErrUnavailable and ErrStoreMoved; branch
// with errors.Is. A *TagError's
// message names the command that fixes it:
//
//	segment: tag "order" not found (add it with: vendor tags add order)
//
// # Stores
//
// segment/pgstore keeps the rows in Postgres (Leaf's leaf_alloc table) and
// kvstore.Store in a JetStream KV bucket. Both implement Store and
// AdminStore, the calls the vendor tags and cluster commands need (Create,
// List, SetStep, SetStrict, Delete, Raise, Seal); segment/segmenttest checks
// that they behave alike. RaiseAll raises one tag or every tag (never
// lowering one), and Move carries a store's rows over to another.
package segment
