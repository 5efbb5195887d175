package ordercheck

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Request is one request and its reply as the order check sees them: who
// sent it, when it was sent and its reply received (nanoseconds since the
// run's start, on one clock), and the lowest and highest ID of the reply.
type Request struct {
	Worker   int
	Sent     int64
	Received int64
	Low      int64
	High     int64
}

// Violation is a reply with an ID not above every ID of a reply received
// before its request was sent.
type Violation struct {
	Request Request // the late reply: Request.Low <= Prior.High
	Prior   Request // the reply with the highest ID received before Request.Sent
}

func (v Violation) String() string {
	return fmt.Sprintf("worker %d's reply received at %v (sent at %v) holds ID %d, not above ID %d of worker %d's reply received at %v",
		v.Request.Worker, time.Duration(v.Request.Received), time.Duration(v.Request.Sent), v.Request.Low,
		v.Prior.High, v.Prior.Worker, time.Duration(v.Prior.Received))
}

// MaxExamples is how many violations a Result describes.
const MaxExamples = 5

// Result is what a check found.
type Result struct {
	Replies    int64 // replies checked
	Violations int64 // replies that broke the order, each counted once
	// Examples are the violations with the earliest receive times, at most
	// MaxExamples, in that order. The online and the offline check give
	// the same.
	Examples []Violation
}

// keepExample adds v to the examples, which stay the MaxExamples received
// first whatever order violations are found in.
func keepExample(examples []Violation, v Violation) []Violation {
	i, _ := slices.BinarySearchFunc(examples, v, func(a, b Violation) int { return cmp.Compare(a.Request.Received, b.Request.Received) })
	if i == MaxExamples {
		return examples
	}
	examples = slices.Insert(examples, i, v)
	return examples[:min(len(examples), MaxExamples)]
}

// Check counts the requests whose lowest ID is not above the highest ID
// of every reply received before they were sent. A reply received at the
// very nanosecond another request was sent counts as overlapping it, not
// before it (a Checker never stamps two events alike). It sweeps the
// requests by send time while it raises the highest ID of the replies by
// receive time: O(n log n).
func Check(reqs []Request) Result {
	bySent := slices.Clone(reqs)
	slices.SortStableFunc(bySent, func(a, b Request) int { return cmp.Compare(a.Sent, b.Sent) })
	byRecv := slices.Clone(reqs)
	slices.SortStableFunc(byRecv, func(a, b Request) int { return cmp.Compare(a.Received, b.Received) })
	res := Result{Replies: int64(len(reqs))}
	var top *Request // the reply with the highest ID received so far; the first received of equals
	done := 0
	for _, r := range bySent {
		for ; done < len(byRecv) && byRecv[done].Received < r.Sent; done++ {
			if top == nil || byRecv[done].High > top.High {
				top = &byRecv[done]
			}
		}
		if top != nil && r.Low <= top.High {
			res.Violations++
			res.Examples = keepExample(res.Examples, Violation{Request: r, Prior: *top})
		}
	}
	return res
}
