package status

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An answer is kept gzipped: sent as it is to a reader that accepts gzip,
// inflated for the others, with the length of what each gets.
func TestAnswerGzippedOrNot(t *testing.T) {
	rows := make([]rowStatus, 5000)
	for i := range rows {
		rows[i] = rowStatus{Tag: fmt.Sprintf("t%05d", i), MaxID: int64(i), Step: 1000}
	}
	a := jsonAnswer(rows)
	if a.size < 10*int64(len(a.gz)) {
		t.Errorf("%d bytes of JSON kept as %d gzipped: want a tenth or less", a.size, len(a.gz))
	}
	for _, tc := range []struct {
		accept string
		gzip   bool
	}{{"", false}, {"gzip", true}, {"deflate, gzip;q=0.5", true}, {"GZIP", true}, {"gzip;q=0", false}, {"br", false}} {
		r := httptest.NewRequest(http.MethodGet, "/status.json?tags=all", nil)
		if tc.accept != "" {
			r.Header.Set("Accept-Encoding", tc.accept)
		}
		rec := httptest.NewRecorder()
		a.write(newStallWriter(rec), r)
		body := rec.Body.Bytes()
		if got := rec.Header().Get("Content-Encoding") == "gzip"; got != tc.gzip {
			t.Fatalf("Accept-Encoding %q: gzipped %v, want %v", tc.accept, got, tc.gzip)
		}
		if tc.gzip {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		if n, _ := strconv.Atoi(rec.Header().Get("Content-Length")); n != rec.Body.Len() || int64(len(body)) != a.size {
			t.Fatalf("Accept-Encoding %q: Content-Length %d, sent %d, JSON %d of %d", tc.accept, n, rec.Body.Len(), len(body), a.size)
		}
		if !bytes.HasPrefix(body, []byte("[\n  {\n    \"biz_tag\": \"t00000\"")) || rec.Code != http.StatusOK {
			t.Fatalf("Accept-Encoding %q: %d %.40q", tc.accept, rec.Code, body)
		}
	}
}

// Past the requests served at once, one waits its turn, then gets a 503;
// when a turn is free, it is served.
func TestTurnsBoundRequestsInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := inTurns(nil, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(rw, "ok")
	}), 1, time.Millisecond)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	done := make(chan int)
	go func() {
		code, _ := get("/slow")
		done <- code
	}()
	<-entered
	if code, body := get("/fast"); code != http.StatusServiceUnavailable || !strings.Contains(body, "busy") {
		t.Fatalf("past the turns: %d %q", code, body)
	}
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("the request served: %d", code)
	}
	if code, _ := get("/fast"); code != http.StatusOK {
		t.Fatalf("with a turn free: %d", code)
	}
}

// A reader that stops reading an expensive answer is cut within
// writeStall of its last progress, and one that reads gets all of it.
func TestStalledReaderIsCut(t *testing.T) {
	// Larger than any socket buffers: incompressible, 16 MB inflated.
	big := make([]byte, 16<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = 'a' + byte(rng.IntN(26))
	}
	a := newAnswer(http.StatusOK, "text/plain", func(w io.Writer) { w.Write(big) })
	closed := make(chan string, 16)
	srv := httptest.NewUnstartedServer(inTurns(nil, http.HandlerFunc(a.write), 4, time.Second))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- c.RemoteAddr().String()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	stalled, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	fmt.Fprintf(stalled, "GET / HTTP/1.1\r\nHost: leaf\r\n\r\n")
	resp, err := http.Get(srv.URL) // a reader that reads, meanwhile
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != int64(len(big)) {
		t.Fatalf("a reader that reads got %d of %d bytes: %v", n, len(big), err)
	}
	timeout := time.After(writeStall + 10*time.Second)
	for cut := ""; cut != stalled.LocalAddr().String(); {
		select {
		case cut = <-closed:
		case <-timeout:
			t.Fatalf("a reader that reads nothing is still served after %v", writeStall+10*time.Second)
		}
	}
	// What it reads now ends before the answer's end.
	got, _ := io.Copy(io.Discard, bufio.NewReader(stalled))
	if got >= int64(len(big)) {
		t.Fatalf("the stalled reader got %d bytes, all of the %d", got, len(big))
	}
}
