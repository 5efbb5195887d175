// Package vending is the wire of leaf-nats: the subjects, the reply
// encodings and error codes, the micro service the workers run (Start), and
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
// DecodeText), so `nats req leaf.segment.order 3` prints three lines. A
// request with the header "Leaf-Encoding: binary" (EncodingHeader,
// EncodingBinary) gets each ID as 8 big-endian bytes instead (AppendBinary,
// DecodeBinary). No reply carries a zero or negative ID.
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
//	503  not ready, lease lost, no segment, clock backwards    ErrUnavailable
//	500  anything else (a bug)                                 ErrInternal
//
// The Client returns such a reply as a *Error; match it with errors.Is and
// the sentinel, or read its Code and Message with errors.As.
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
// Requests that fail with a 503, a timeout or no responders are retried with
// exponential backoff and jitter (ClientConfig.Retries, BackoffMin and
// BackoffMax); a 400, 404 or
// 500 is returned at once. Counts outside 1..max batch and malformed tags are
// refused without a request.
//
// ClientConfig.Prefetch (with LowWater) gives each Source a local buffer: Next takes
// an ID from memory under a mutex, and when the buffer holds lowWater IDs or
// fewer, one background goroutine per Source asks for size more in the
// binary encoding, while callers keep taking from what is left. A refill
// that fails is not retried in a loop: its error is returned by the Next
// that finds the buffer empty, and the following call refills anew. Close
// stops the refill goroutines and waits for them.
package vending
