package ordercheck

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaf-nats/leaf/ids"
)

// The writer's lines read back as written, runs of consecutive IDs joined,
// past many buffers' worth from goroutines at once; and the offline check
// of the file finds what the Checker found.
func TestHistoryRoundTrip(t *testing.T) {
	var file bytes.Buffer
	start := time.Now()
	hw, err := NewWriter(&file, Header{Start: start, Subject: "leaf.segment.order", Workers: 4, Batch: 3})
	if err != nil {
		t.Fatal(err)
	}
	c := NewChecker(start)
	var vendors [2]atomic.Int64
	vendors[1].Store(1 << 40)
	var wg sync.WaitGroup
	const workers, n = 4, 5000 // 4 x 5000 lines of ~70 bytes: buffers fill
	for w := range workers {
		buf := hw.Buffer(w)
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 2))
			for i := range n {
				s := c.Send()
				if i%100 == 99 {
					buf.Failure(s.At, c.Now(), "503")
					continue
				}
				v := &vendors[r.IntN(2)]
				got := []int64{v.Add(1), v.Add(1), v.Add(1)} // consecutive unless another worker took one between
				req := c.Receive(s, w, got[0], got[2])
				buf.Reply(req.Sent, req.Received, got)
			}
		})
	}
	wg.Wait()
	if err := hw.Close(); err != nil {
		t.Fatal(err)
	}

	var recs []Record
	h, err := ReadHistory(bytes.NewReader(file.Bytes()), func(rec Record) error {
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if h.Format != Format || !h.Start.Equal(start) || h.Subject != "leaf.segment.order" || h.Workers != 4 || h.Batch != 3 {
		t.Fatalf("header %+v", h)
	}
	failures := 0
	for _, rec := range recs {
		if rec.Error != "" {
			failures++
		} else if ids.Count(rec.Runs) != 3 {
			t.Fatalf("record %+v does not hold 3 IDs", rec)
		}
	}
	if len(recs) != workers*n || failures != workers*n/100 {
		t.Fatalf("%d records, %d failures; want %d and %d", len(recs), failures, workers*n, workers*n/100)
	}
	_, offline, err := CheckHistory(bytes.NewReader(file.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if online := c.Result(); online.Violations == 0 || !reflect.DeepEqual(online, offline) {
		t.Fatalf("online %+v, offline %+v; want the same violations, some", online, offline)
	}
}

func TestHistoryLines(t *testing.T) {
	var file bytes.Buffer
	hw, err := NewWriter(&file, Header{Start: time.Date(2025, 1, 2, 15, 4, 5, 123456789, time.UTC), Subject: "leaf.segment.order", Workers: 2, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	hw.Buffer(0).Reply(52014, 391733, []int64{1, 2, 3, 7, 8, 5})
	hw.Buffer(1).Failure(52231, 1003112, "503")
	if err := hw.Close(); err != nil {
		t.Fatal(err)
	}
	want := `{"format":"leaf-loadgen-history/1","start":"2025-01-02T15:04:05.123456789Z","subject":"leaf.segment.order","workers":2,"batch":1}
{"w":0,"sent":52014,"recv":391733,"runs":[[1,3],[7,2],[5,1]]}
{"w":1,"sent":52231,"recv":1003112,"error":"503"}
`
	if file.String() != want {
		t.Fatalf("history\n%s\nwant\n%s", file.String(), want)
	}
	var recs []Record
	if _, err := ReadHistory(strings.NewReader(want), func(r Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if req, ok := recs[0].Request(); !ok || req != (Request{Worker: 0, Sent: 52014, Received: 391733, Low: 1, High: 8}) {
		t.Fatalf("first request %+v", req)
	}
	if _, ok := recs[1].Request(); ok || recs[1].Error != "503" {
		t.Fatalf("second record %+v; want the 503", recs[1])
	}
}

func TestReadHistoryRefuses(t *testing.T) {
	const header = `{"format":"leaf-loadgen-history/1","start":"2025-01-02T15:04:05Z"}` + "\n"
	for _, tc := range []struct{ name, file, want string }{
		{"empty", "", "empty"},
		{"no header", `{"w":0,"sent":1,"recv":2,"runs":[[1,1]]}`, "not a leaf-loadgen-history/1 header"},
		{"other format", `{"format":"jepsen"}`, "header"},
		{"not JSON", header + "w=0 sent=1\n", "line 2"},
		{"no times", header + `{"w":0,"runs":[[1,1]]}`, `"sent" and "recv"`},
		{"received before sent", header + `{"w":0,"sent":5,"recv":4,"runs":[[1,1]]}`, "before it was sent"},
		{"neither runs nor error", header + `{"w":0,"sent":1,"recv":2}`, `"runs" or "error"`},
		{"both", header + `{"w":0,"sent":1,"recv":2,"runs":[[1,1]],"error":"503"}`, `"runs" or "error"`},
		{"zero ID", header + `{"w":0,"sent":1,"recv":2,"runs":[[0,1]]}`, "positive IDs"},
		{"empty run", header + `{"w":0,"sent":1,"recv":2,"runs":[[5,0]]}`, "positive IDs"},
		{"run past int64", header + `{"w":0,"sent":1,"recv":2,"runs":[[9223372036854775807,2]]}`, "positive IDs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := CheckHistory(strings.NewReader(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one saying %q", err, tc.want)
			}
		})
	}
}

type failingWriter struct{ writes int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.writes++; w.writes > 1 { // the header passes
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

// A history that cannot be written does not stop the run: its workers
// never block on it, and Close says what went wrong.
func TestHistoryWriteError(t *testing.T) {
	hw, err := NewWriter(&failingWriter{}, Header{Start: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	b := hw.Buffer(0)
	for i := range 100_000 { // many buffers' worth
		b.Reply(int64(i), int64(i+1), []int64{int64(i + 1)})
	}
	if err := hw.Close(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Close: %v; want the write error", err)
	}
}

func BenchmarkBufferReply(b *testing.B) {
	hw, err := NewWriter(io.Discard, Header{Start: time.Now()})
	if err != nil {
		b.Fatal(err)
	}
	buf := hw.Buffer(0)
	got := []int64{1862213154793730049}
	b.ReportAllocs()
	for i := int64(0); b.Loop(); i++ {
		buf.Reply(i, i+300_000, got)
	}
	hw.Close()
}
