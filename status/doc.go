// Package status shows a vendor to its operators: /metrics (Prometheus),
// /healthz, /readyz, a live status page (/, with /status.json and
// /cluster.json behind it) and the data of its micro stats.
//
// A State reads the vendor's parts through the small interfaces declared
// here (the worker-ID keeper, the segment allocator and store, the cluster
// guard), so that the page, /readyz, the metrics and `nats micro stats`
// tell one truth. Metrics counts the requests (it is the service's
// vending.Observer) without allocating on the hot path. A Server serves it
// all on LEAF_HTTP_ADDR with time-outs at every stage of a request and a
// cap on the connections it holds (a new connection past the cap closes the
// oldest idle one), so that no client can hold the descriptors the vendor
// and its embedded NATS server need.
//
// No reader can make the vendor pay for its numbers either (issue 27):
//
//   - /healthz and /readyz answer whatever else is open. When every
//     connection under the cap is busy (readers that do not read,
//     pipelined requests), a new one goes to a few kept past it for them
//     alone (connLimit); /readyz reads no tag while the store answers.
//   - The answers whose cost grows with the tags or the vendors (/metrics,
//     /status.json, /cluster.json) are computed at most once a second, and
//     at most a tenth of the time when one takes long, for all the
//     requests waiting (shared): looping readers cannot keep a core busy,
//     and the cluster table's NATS traffic does not grow with its readers.
//     A request never gets an answer older than itself.
//   - Each such answer is kept gzipped and served a few requests at a time
//     (turns), in chunks whose writes must go through within seconds, so
//     that a reader that stops reading is cut and the memory held stays
//     bounded whatever the number of readers.
//
// /readyz answers 200 while the vendor can vend (a worker-ID lease held,
// the contract checked, a segment store that answers or buffers not
// empty), else 503 and why; a vendor that cannot see some of its peers says
// so in the body of a 200.
package status
