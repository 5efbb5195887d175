// Package ordercheck checks that a run's IDs respect real-time order, the
// promise of a strict tag: when one request's reply was received before
// another request was sent, every ID of the second is greater than every ID
// of the first. Requests that overlap in time may be answered in either
// order. This is linearizability of a counter, checked across every
// goroutine and connection of one process, on one monotonic clock.
//
// # Online
//
// A Checker stamps each request's send and its reply's receipt and counts
// the violations as the replies arrive, with no lock on the way:
//
//	c := ordercheck.NewChecker(time.Now())
//	s := c.Send()             // just before the request goes out
//	...                       // the request, its reply with IDs low..high
//	req := c.Receive(s, worker, low, high)
//	...
//	res := c.Result()         // res.Violations, res.Examples
//
// # Offline
//
// A history holds each request's send and receive times and its IDs; Check
// counts the violations of a slice of requests, and CheckHistory those of
// a history file that a Writer streamed (one JSON object a line; the format
// is documented at Writer). For the same run the offline check counts
// exactly what the Checker counted, because the times a Checker stamps are
// the order in which it checked.
package ordercheck
