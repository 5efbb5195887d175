package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/leaf-nats/leaf/ordercheck"
)

// historyFile is the -history file and the writer streaming to it.
type historyFile struct {
	w *ordercheck.Writer
	f *os.File
}

// openHistory creates the -history file and writes its header; nil
// without -history.
func openHistory(cfg config, subject string, start time.Time) (*historyFile, error) {
	if cfg.history == "" {
		return nil, nil
	}
	f, err := os.Create(cfg.history)
	if err != nil {
		return nil, fmt.Errorf("-history: %w", err)
	}
	w, err := ordercheck.NewWriter(f, ordercheck.Header{Start: start, Subject: subject, Workers: cfg.conc, Batch: cfg.batch})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("-history: %w", err)
	}
	return &historyFile{w: w, f: f}, nil
}

// finish writes the rest of the history and closes the file; a nil h has
// nothing to write.
func (h *historyFile) finish() error {
	if h == nil {
		return nil
	}
	err := errors.Join(h.w.Close(), h.f.Close())
	if err != nil {
		return fmt.Errorf("-history %s is incomplete: %w", h.f.Name(), err)
	}
	return nil
}

// setOrder puts the order check's result in the report.
func (r *report) setOrder(res ordercheck.Result) {
	r.OrderViolations = &res.Violations
	for _, v := range res.Examples {
		r.OrderExamples = append(r.OrderExamples, v.String())
	}
}

func (r *report) printOrder(w io.Writer) {
	if r.OrderViolations == nil {
		return
	}
	fmt.Fprintf(w, "order     %d violations  (replies with an ID not above every ID received before they were asked for)\n", *r.OrderViolations)
	for _, e := range r.OrderExamples {
		fmt.Fprintf(w, "          %s\n", e)
	}
}

// historyReport is the result of -check-history; its JSON is the -json output.
type historyReport struct {
	History         string    `json:"history"`
	Subject         string    `json:"subject,omitempty"`
	Start           time.Time `json:"start"`
	Replies         int64     `json:"replies"`
	OrderViolations int64     `json:"order_violations"`
	OrderExamples   []string  `json:"order_examples,omitempty"`
}

// checkHistory is -check-history: it checks a history's order offline, as
// -check-order did online, and returns the exit code.
func checkHistory(cfg config, stdout, stderr io.Writer) int {
	f, err := os.Open(cfg.checkHistory)
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: -check-history: %v\n", err)
		return exitFail
	}
	defer f.Close()
	h, res, err := ordercheck.CheckHistory(f)
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: -check-history %s: %v\n", cfg.checkHistory, err)
		return exitFail
	}
	r := &historyReport{History: cfg.checkHistory, Subject: h.Subject, Start: h.Start, Replies: res.Replies, OrderViolations: res.Violations}
	for _, v := range res.Examples {
		r.OrderExamples = append(r.OrderExamples, v.String())
	}
	if err := output(cfg, r, r.print, stdout); err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return exitFail
	}
	if r.OrderViolations > 0 {
		fmt.Fprintf(stderr, "loadgen: FAIL: %d order violations; the first: %s\n", r.OrderViolations, r.OrderExamples[0])
		return exitFail
	}
	return exitOK
}

func (r *historyReport) print(w io.Writer) {
	fmt.Fprintf(w, "history   %s: %s, started %s\n", r.History, r.Subject, r.Start.Format(time.RFC3339Nano))
	fmt.Fprintf(w, "replies   %d\n", r.Replies)
	fmt.Fprintf(w, "order     %d violations\n", r.OrderViolations)
	for _, e := range r.OrderExamples {
		fmt.Fprintf(w, "          %s\n", e)
	}
}
