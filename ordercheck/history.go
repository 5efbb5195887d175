package ordercheck

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/leaf-nats/leaf/ids"
)

// Format names the history format in a history's header line.
const Format = "leaf-loadgen-history/1"

// Header is a history's first line.
type Header struct {
	Format  string    `json:"format"`
	Start   time.Time `json:"start"` // the run's wall-clock start; the lines' times count from it
	Subject string    `json:"subject,omitempty"`
	Workers int       `json:"workers,omitempty"`
	Batch   int       `json:"batch,omitempty"`
}

// Record is one request as a history line holds it.
type Record struct {
	Worker   int
	Sent     int64       // ns since the start
	Received int64       // ns since the start: the reply or the error
	Runs     []ids.Range // the reply's IDs as runs of consecutive IDs, in the reply's order
	Error    string      // what went wrong instead (an error code such as 503 or timeout)
}

// recordLine is a Record's JSON.
type recordLine struct {
	Worker   *int       `json:"w"`
	Sent     *int64     `json:"sent"`
	Received *int64     `json:"recv"`
	Runs     [][2]int64 `json:"runs"`
	Error    string     `json:"error"`
}

// Writer streams a history. Its first line is the Header; then each request
// is one line, a JSON object with the worker's index "w", "sent" and "recv"
// in nanoseconds since the start, and either "runs", the IDs as [first,
// count] pairs, or "error":
//
//	{"format":"leaf-loadgen-history/1","start":"2025-01-02T15:04:05.123456789Z","subject":"leaf.segment.order","workers":2,"batch":1}
//	{"w":0,"sent":52014,"recv":391733,"runs":[[1,1]]}
//	{"w":1,"sent":52231,"recv":1003112,"error":"503"}
//
// Lines come in chunks per worker, not in time order. Each worker appends
// to a Buffer of its own, with no lock; full buffers go to one goroutine
// that writes them, so that recording barely slows the run it records. A
// few buffers at most wait for it: a disk slower than the run slows the
// run rather than filling memory.
type Writer struct {
	w       io.Writer
	full    chan []byte
	free    chan []byte
	done    chan struct{}
	err     error // the first write error; the writing goroutine's until done
	mu      sync.Mutex
	buffers []*Buffer
}

const (
	bufferSize = 64 << 10
	inFlight   = 8 // full buffers that may wait for the writing goroutine
)

// NewWriter writes h to w and starts the goroutine that writes the lines;
// Close stops it.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	h.Format = Format
	line, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(append(line, '\n')); err != nil {
		return nil, fmt.Errorf("ordercheck: write the history's header: %w", err)
	}
	hw := &Writer{w: w, full: make(chan []byte, inFlight), free: make(chan []byte, inFlight), done: make(chan struct{})}
	go hw.writeLoop()
	return hw, nil
}

func (hw *Writer) writeLoop() {
	defer close(hw.done)
	for b := range hw.full {
		if hw.err == nil {
			if _, err := hw.w.Write(b); err != nil {
				hw.err = fmt.Errorf("ordercheck: write the history: %w", err)
			}
		}
		select {
		case hw.free <- b[:0]:
		default:
		}
	}
}

// Buffer returns a buffer for the lines of one worker, which must be its
// only user.
func (hw *Writer) Buffer(worker int) *Buffer {
	b := &Buffer{hw: hw, worker: worker, b: make([]byte, 0, bufferSize)}
	hw.mu.Lock()
	defer hw.mu.Unlock()
	hw.buffers = append(hw.buffers, b)
	return b
}

// Close writes what the buffers hold, stops the writing goroutine and
// returns the first write error. Call it once the buffers' workers are done.
func (hw *Writer) Close() error {
	hw.mu.Lock()
	for _, b := range hw.buffers {
		if len(b.b) > 0 {
			hw.full <- b.b
			b.b = nil
		}
	}
	hw.mu.Unlock()
	close(hw.full)
	<-hw.done
	return hw.err
}

// Buffer holds one worker's lines until there are enough to write.
type Buffer struct {
	hw     *Writer
	worker int
	b      []byte
}

// Reply records a request sent at sent whose reply, received at received,
// held ids.
func (b *Buffer) Reply(sent, received int64, got []int64) {
	b.b = b.start(sent, received)
	b.b = append(b.b, `,"runs":[`...)
	for i := 0; i < len(got); {
		j := i + 1
		for j < len(got) && got[j] == got[j-1]+1 {
			j++
		}
		if i > 0 {
			b.b = append(b.b, ',')
		}
		b.b = append(strconv.AppendInt(append(b.b, '['), got[i], 10), ',')
		b.b = append(strconv.AppendInt(b.b, int64(j-i), 10), ']')
		i = j
	}
	b.b = append(b.b, "]}\n"...)
	b.flushIfFull()
}

// Failure records a request sent at sent that failed at received with code.
func (b *Buffer) Failure(sent, received int64, code string) {
	b.b = b.start(sent, received)
	b.b = strconv.AppendQuote(append(b.b, `,"error":`...), code)
	b.b = append(b.b, "}\n"...)
	b.flushIfFull()
}

func (b *Buffer) start(sent, received int64) []byte {
	l := strconv.AppendInt(append(b.b, `{"w":`...), int64(b.worker), 10)
	l = strconv.AppendInt(append(l, `,"sent":`...), sent, 10)
	return strconv.AppendInt(append(l, `,"recv":`...), received, 10)
}

func (b *Buffer) flushIfFull() {
	if len(b.b) < bufferSize {
		return
	}
	b.hw.full <- b.b
	select {
	case b.b = <-b.hw.free:
	default:
		b.b = make([]byte, 0, bufferSize)
	}
}

// ReadHistory reads a history from r: its header, then each request line,
// checked, to fn. An error from fn ends the reading and is returned.
func ReadHistory(r io.Reader, fn func(Record) error) (Header, error) {
	br := bufio.NewReaderSize(r, bufferSize)
	var h Header
	line, err := br.ReadBytes('\n')
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		return h, fmt.Errorf("ordercheck: read the history: %w", err)
	case len(line) == 0:
		return h, errors.New("ordercheck: the history is empty; want a header line first")
	}
	if err := json.Unmarshal(line, &h); err != nil || h.Format != Format {
		return h, fmt.Errorf("ordercheck: the history's first line is not a %s header: %.100q", Format, line)
	}
	for n := 2; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			rec, perr := parseRecord(line)
			if perr != nil {
				return h, fmt.Errorf("ordercheck: history line %d: %w", n, perr)
			}
			if err := fn(rec); err != nil {
				return h, err
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			return h, nil
		case err != nil:
			return h, fmt.Errorf("ordercheck: read the history: %w", err)
		}
	}
}

// parseRecord decodes and validates one request line.
func parseRecord(line []byte) (Record, error) {
	var l recordLine
	if err := json.Unmarshal(line, &l); err != nil {
		return Record{}, err
	}
	switch {
	case l.Worker == nil || l.Sent == nil || l.Received == nil:
		return Record{}, errors.New(`a request line needs "w", "sent" and "recv"`)
	case *l.Received < *l.Sent:
		return Record{}, fmt.Errorf("received at %d, before it was sent at %d", *l.Received, *l.Sent)
	case (len(l.Runs) == 0) == (l.Error == ""):
		return Record{}, errors.New(`a request line needs "runs" or "error", not both`)
	}
	rec := Record{Worker: *l.Worker, Sent: *l.Sent, Received: *l.Received, Error: l.Error}
	for _, r := range l.Runs {
		if r[0] <= 0 || r[1] < 1 || r[0] > (1<<63-1)-(r[1]-1) {
			return Record{}, fmt.Errorf("run [%d,%d] is not a run of positive IDs", r[0], r[1])
		}
		rec.Runs = append(rec.Runs, ids.Range{First: r[0], Count: r[1]})
	}
	return rec, nil
}

// Request returns a reply's record as the order check sees it; false for
// an error's.
func (rec Record) Request() (Request, bool) {
	if len(rec.Runs) == 0 {
		return Request{}, false
	}
	r := Request{Worker: rec.Worker, Sent: rec.Sent, Received: rec.Received, Low: rec.Runs[0].First, High: rec.Runs[0].Last()}
	for _, run := range rec.Runs[1:] {
		r.Low, r.High = min(r.Low, run.First), max(r.High, run.Last())
	}
	return r, true
}

// CheckHistory reads a history and checks its replies' order (Check),
// with about 120 bytes of memory a reply.
func CheckHistory(r io.Reader) (Header, Result, error) {
	var reqs []Request
	h, err := ReadHistory(r, func(rec Record) error {
		if req, ok := rec.Request(); ok {
			reqs = append(reqs, req)
		}
		return nil
	})
	if err != nil {
		return h, Result{}, err
	}
	return h, Check(reqs), nil
}
