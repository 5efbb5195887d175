package status

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// servedAtOnce is how many requests for one expensive answer are served at
// once (waiting for it or being written); waitServed is how long a request
// waits for its turn before a 503. Together with shared they bound what
// readers cost, whatever their number: the answers held, the work of
// writing them, the connections busy with them.
const (
	servedAtOnce = 4
	waitServed   = 5 * time.Second
)

// writeStall is how long one write of an answer may wait for the reader:
// a reader that takes no bytes for that long is cut. writeMax bounds the
// writing of a whole expensive answer, for readers that read, but slowly.
const (
	writeStall = 5 * time.Second
	writeMax   = 30 * time.Second
)

// answer is an expensive answer as computed once for all its readers: its
// body is kept gzipped (a tenth of the size of the JSON of 20,000 tags),
// sent as it is to readers that accept gzip and inflated a chunk at a time
// for the others, so that a reader costs the vendor a few kilobytes.
type answer struct {
	code  int
	ctype string
	gz    []byte
	size  int64 // uncompressed
}

// jsonAnswer computes the answer of v as JSON.
func jsonAnswer(v any) answer {
	return newAnswer(http.StatusOK, "application/json", func(w io.Writer) {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(v)
	})
}

// textAnswer computes an answer of code saying msg, as http.Error does.
func textAnswer(code int, msg string) answer {
	return newAnswer(code, "text/plain; charset=utf-8", func(w io.Writer) { io.WriteString(w, msg+"\n") })
}

func newAnswer(code int, ctype string, write func(io.Writer)) answer {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed) // a valid level
	cw := &countWriter{w: zw}
	write(cw)
	zw.Close()
	return answer{code: code, ctype: ctype, gz: buf.Bytes(), size: cw.n}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// write sends a to the reader of r, gzipped if it accepts that, in chunks
// whose writes rw (a stallWriter) bounds.
func (a answer) write(rw http.ResponseWriter, r *http.Request) {
	h := rw.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Add("Vary", "Accept-Encoding")
	if acceptsGzip(r.Header) {
		h.Set("Content-Encoding", "gzip")
		h.Set("Content-Length", strconv.Itoa(len(a.gz)))
		rw.WriteHeader(a.code)
		for rest := a.gz; len(rest) > 0; {
			n := min(len(rest), chunk)
			if _, err := rw.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		return
	}
	h.Set("Content-Length", strconv.FormatInt(a.size, 10))
	rw.WriteHeader(a.code)
	zr, err := gzip.NewReader(bytes.NewReader(a.gz))
	if err != nil {
		return // not reached: the vendor wrote it
	}
	io.CopyBuffer(rw, zr, make([]byte, chunk))
}

// chunk is the most an answer's writer sends in one write, so that each
// write's deadline (writeStall) asks for progress, not for the whole.
const chunk = 32 << 10

// acceptsGzip says whether a request's Accept-Encoding takes gzip.
func acceptsGzip(h http.Header) bool {
	for _, v := range h.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(part, ";")
			if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
				continue
			}
			q, err := strconv.ParseFloat(strings.TrimPrefix(strings.TrimSpace(params), "q="), 64)
			return params == "" || err != nil || q > 0
		}
	}
	return false
}

// sharedAnswer serves the answer compute computes, shared (costly: see
// shared) and in turns, until stop is closed.
func sharedAnswer(stop <-chan struct{}, costly bool, compute func() answer) http.Handler {
	s := newShared(stop, costly, compute)
	return turns(stop, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		a, err := s.get()
		if err != nil {
			http.Error(rw, "no answer: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		a.write(rw, r)
	}))
}

// turns serves h to at most servedAtOnce requests at once: the others wait
// their turn for up to waitServed, then get a 503. A request waiting holds
// no more than its connection, and its connection reads no more requests
// meanwhile: pipelined requests wait in line. Each write of an answer
// must go through within writeStall, the whole answer within writeMax.
// The wait ends when stop is closed.
func turns(stop <-chan struct{}, h http.Handler) http.Handler {
	return inTurns(stop, h, servedAtOnce, waitServed)
}

// inTurns is turns with n requests at once, waiting wait.
func inTurns(stop <-chan struct{}, h http.Handler, n int, wait time.Duration) http.Handler {
	held := make(chan struct{}, n) // one a turn
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !takeTurn(held) {
			timer := time.NewTimer(wait)
			defer timer.Stop()
			if !waitTurn(rw, r, held, timer.C, stop, n) {
				return
			}
		}
		defer func() { <-held }()
		h.ServeHTTP(newStallWriter(rw), r)
	})
}

// takeTurn takes a free turn without waiting. A turn free is taken even
// when the wait's timer would also be ready (a scheduler late by more than
// the wait): select would pick one of the two at random.
func takeTurn(held chan struct{}) bool {
	select {
	case held <- struct{}{}:
		return true
	default:
		return false
	}
}

// waitTurn waits for a turn until expired or stop, answering 503 if none
// comes, and says whether the turn was taken.
func waitTurn(rw http.ResponseWriter, r *http.Request, held chan struct{}, expired <-chan time.Time, stop <-chan struct{}, n int) bool {
	select {
	case held <- struct{}{}:
		return true
	case <-r.Context().Done():
		return false // the reader has gone
	case <-expired:
		rw.Header().Set("Retry-After", "1")
		http.Error(rw, "busy: "+strconv.Itoa(n)+" requests for this page are being served; try again", http.StatusServiceUnavailable)
		return false
	case <-stop:
		http.Error(rw, "no answer: "+errStopped.Error(), http.StatusServiceUnavailable)
		return false
	}
}

// stallWriter gives each write of an answer writeStall to go through,
// within writeMax of the first: a reader that stops reading is cut in
// seconds, and one that reads holds its turn for writeMax at most.
type stallWriter struct {
	http.ResponseWriter
	rc  *http.ResponseController
	end time.Time
}

func newStallWriter(rw http.ResponseWriter) *stallWriter {
	return &stallWriter{ResponseWriter: rw, rc: http.NewResponseController(rw), end: time.Now().Add(writeMax)}
}

func (w *stallWriter) Write(p []byte) (int, error) {
	deadline := time.Now().Add(writeStall)
	if deadline.After(w.end) {
		deadline = w.end
	}
	w.rc.SetWriteDeadline(deadline)
	return w.ResponseWriter.Write(p)
}

// Unwrap lets an http.ResponseController reach the connection.
func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
