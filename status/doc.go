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
// /readyz answers 200 while the vendor can vend (a worker-ID lease held,
// the contract checked, a segment store that answers or buffers not
// empty), else 503 and why; a vendor that cannot see some of its peers says
// so in the body of a 200.
package status
