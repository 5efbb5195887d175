// Package vending is the wire of leaf-nats: the subjects, the reply
// encodings and error codes, the micro service the workers run (Open), and
// the Go client consumers use (NewClient).
//
// # Subjects
//
// With the default prefix "leaf" (LEAF_SUBJECT_PREFIX, ClientConfig.Prefix):
//
//	leaf.snowflake          snowflake IDs
//	leaf.segment.<tag>      segment IDs of business tag <tag>
//	leaf.snowflake.decode   one ID in; JSON {"id","time","timestamp_ms","worker_id","sequence"} out
//
// All are endpoints of the micro service "leaf" in queue group "leaf", so
// `nats micro info leaf` lists them and any number of workers share the load.
//
// # Wire format
//
// A request body is empty for one ID or an ASCII decimal n for n IDs,
// 1 <= n <= LEAF_MAX_BATCH (default 10000); see ParseCount. The reply is the
// IDs in ascending order as decimals separated by "\n" (AppendText,
// DecodeText), so `nats req leaf.segment.order 3` prints three lines. The
// request header "Leaf-Encoding" (EncodingHeader) asks for another encoding:
//
//	binary   each ID as 8 big-endian bytes (AppendBinary, DecodeBinary)
//	ranges   runs of consecutive IDs, 16 bytes each: first ID and count,
//	         8 big-endian bytes each, ascending (AppendRanges, DecodeRanges);
//	         the reply carries "Leaf-Encoding: ranges" too
//
// In ranges a segment batch is one run (two across a segment switch) and a
// snowflake batch one run per millisecond, so a segment request may ask for
// up to LEAF_MAX_RANGE_BATCH IDs (Config.MaxRangeBatch, default 10^9). No
// reply carries a zero or negative ID, and every reply is all or nothing.
//
// # Errors
//
// An error reply carries no IDs: the micro headers Nats-Service-Error (a
// sentence a person can act on) and Nats-Service-Error-Code, and the same
// sentence as its body, so that a client that ignores headers cannot take
// an error for an ID:
//
//	400  malformed count, count out of range, malformed tag   ErrBadRequest
//	404  unknown segment tag                                   ErrNotFound
//	410  a tag's IDs used up; snowflake time bits past their end  ErrGone
//	429  a tag asked for faster than its rate limit            ErrTooManyRequests
//	503  not ready, lease lost, no segment, clock backwards    ErrUnavailable
//	500  anything else (a bug)                                 ErrInternal
//
// The Client returns such a reply as a *Error; match it with errors.Is and
// the sentinel, or read its Code and Message with errors.As.
//
// # Reply subjects
//
// A requester picks the reply subject, and the vendor publishes its answer
// there with its own permissions. So the service (and the strict tags'
// Forwarder) answers only inboxes (Config.ReplyPrefixes: _INBOX. and _R_.,
// where a service imported from another account replies), never a '$'
// subject, never the service's own subjects, never the inboxes its JetStream
// requests wait on (Config.OwnInboxes): any other request is dropped
// unanswered, with no ID taken, and the Observer is told (Replies).
//
// # Strict tags
//
// A Forwarder carries a strict tag's requests from the vendors that do not
// lead it to the one that does, on <prefix>.strict.<tag>, within the same
// limits as the service (package strict decides who leads). A request is
// forwarded (the leader answers the forwarding vendor, which answers the
// client) or, while the leader answers, handed off (Handoffs): the leader
// answers the client directly. A leader that steps down says so on
// GoneSubject, and Follow makes the other vendors forward again at once; a
// request handed to no leader gets NATS's "no responders" back on the
// handing vendor's inbox, which answers the client a 503. A leader whose
// NATS user may not answer clients directly says so in its answers to
// forwards, and is not handed requests.
//
// # Client
//
// NewClient wraps a *nats.Conn. Client.Next and Client.NextN take snowflake
// IDs; Client.Segment(tag) returns a Source with the same methods for a
// segment tag:
//
//	c, err := vending.NewClient(nc, vending.ClientConfig{Timeout: time.Second})
//	...
//	defer c.Close()
//	id, err := c.Next(ctx)
//	orders, err := c.Segment("order")
//	ids, err := orders.NextN(ctx, 100)
//
// Requests that fail with a 503 or 429, a timeout or no responders are retried with
// exponential backoff and jitter (ClientConfig.Retries, BackoffMin and
// BackoffMax); a 400, 404 or
// 500 is returned at once. Counts outside 1..max batch and malformed tags are
// refused without a request.
//
// The client asks for batches in the ranges encoding, and for a single ID
// in text; it reads text replies to any request, so a vendor from before
// ranges still serves it. Source.NextRanges returns the runs themselves.
//
// ClientConfig.Prefetch (with LowWater) gives each Source a local buffer of
// runs. Source.Next takes an ID from it with one atomic add and no lock;
// Source.Block reserves n IDs with one atomic add, for one goroutine to hand
// out with Block.Next, which touches no shared memory: the way to scale with
// goroutines. When the buffer holds LowWater IDs or fewer, one background
// goroutine per Source asks for Prefetch more in one ranges request, while
// callers keep taking what is left; one request at a time, so that one
// goroutine taking IDs of a tag from one vendor sees them ascend. A refill
// that fails is not retried in a loop: its error is returned by the call
// that finds the buffer empty, and the following call refills anew. Close
// stops the refill goroutines and waits for them.
package vending
