package vending_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leaf-nats/leaf/ids"
	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/vendtest"
	"github.com/leaf-nats/leaf/segment"
	"github.com/leaf-nats/leaf/snowflake"
	"github.com/leaf-nats/leaf/vending"
)

// startVendor runs one vending service on its own connection, as a vendor
// process would, with a snowflake generator of its own worker ID (which
// package workerid would hold for a vendor: here each test gives distinct
// ones).
func startVendor(t *testing.T, s *server.Server, workerID int) *snowflake.Generator {
	t.Helper()
	g, err := snowflake.New(snowflake.Settings{WorkerID: workerID})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := vending.Open(natstest.Conn(t, s), vending.Config{Snowflake: g})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	return g
}

func TestThreeVendorsShareTheLoad(t *testing.T) {
	s := natstest.Server(t)
	for id := range 3 {
		startVendor(t, s, id+1)
	}
	nc := natstest.Conn(t, s)
	const clients, perClient, batch = 50, 667, 5 // 100,050 IDs
	results := make([][]int64, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				body, want := []byte(strconv.Itoa(batch)), batch
				if i%2 == 1 {
					body, want = nil, 1 // mix single-ID requests in
				}
				msg, err := nc.Request("leaf.snowflake", body, 5*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
					t.Errorf("error %s: %s", code, msg.Header.Get(micro.ErrorHeader))
					return
				}
				ids, err := vending.DecodeText(nil, msg.Data)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ids) != want {
					t.Errorf("asked for %d IDs, got %d", want, len(ids))
					return
				}
				results[c] = append(results[c], ids...)
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	workers := map[int]int{}
	for _, ids := range results {
		for _, id := range ids {
			if id <= 0 || seen[id] {
				t.Fatalf("ID %d is a duplicate or not positive", id)
			}
			seen[id] = true
			p, _ := snowflake.Decode(id, snowflake.DefaultEpoch)
			workers[p.WorkerID]++
		}
	}
	want := clients * (perClient/2*(batch+1) + perClient%2*batch)
	if len(seen) != want {
		t.Fatalf("%d unique IDs, want %d", len(seen), want)
	}
	if len(workers) != 3 {
		t.Fatalf("IDs came from worker IDs %v, want three distinct", workers)
	}
	t.Logf("%d unique IDs from worker IDs %v", len(seen), workers)
}

func TestRepliesAndErrors(t *testing.T) {
	s := natstest.Server(t)
	g := startVendor(t, s, 1)
	nc := natstest.Conn(t, s)

	msg := vendtest.Request(t, nc, "leaf.snowflake", "5")
	ids, err := vending.DecodeText(nil, msg.Data)
	if err != nil || len(ids) != 5 {
		t.Fatalf("5 IDs: %q, %v", msg.Data, err)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("IDs not ascending: %v", ids)
		}
	}

	for _, body := range []string{"abc", "0", "-1", "10001", "1e3", "5\x00"} {
		msg := vendtest.Request(t, nc, "leaf.snowflake", body)
		desc := msg.Header.Get(micro.ErrorHeader)
		if code := msg.Header.Get(micro.ErrorCodeHeader); code != "400" || string(msg.Data) != desc {
			t.Fatalf("body %q: code %q, data %q; want 400 and the error sentence as the body", body, code, msg.Data)
		}
		if len(desc) < 20 {
			t.Fatalf("body %q: error %q does not explain", body, desc)
		}
		// A client that ignores the headers cannot read it as IDs.
		if ids, err := vending.DecodeText(nil, msg.Data); err == nil {
			t.Fatalf("body %q: the error body decodes as IDs %v", body, ids)
		}
	}

	msg = vendtest.Request(t, nc, "leaf.snowflake.decode", strconv.FormatInt(ids[0], 10))
	var d vending.Decoded
	if err := json.Unmarshal(msg.Data, &d); err != nil {
		t.Fatalf("decode reply %q: %v", msg.Data, err)
	}
	if d.ID != strconv.FormatInt(ids[0], 10) || d.WorkerID != g.WorkerID() || d.TimestampMs == 0 {
		t.Fatalf("decoded %+v", d)
	}
	for _, body := range []string{"", "0", "-3", "x"} {
		if code := vendtest.Request(t, nc, "leaf.snowflake.decode", body).Header.Get(micro.ErrorCodeHeader); code != "400" {
			t.Fatalf("decode %q: code %q, want 400", body, code)
		}
	}

	// A lost lease: 503, never an ID.
	g.Revoke()
	msg = vendtest.Request(t, nc, "leaf.snowflake", "")
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "503" || string(msg.Data) != msg.Header.Get(micro.ErrorHeader) {
		t.Fatalf("revoked: code %q data %q, want 503 with the sentence as the body", code, msg.Data)
	}
}

// requestEnc sends body to subject asking for encoding enc.

func TestEncodings(t *testing.T) {
	s := natstest.Server(t)
	startVendor(t, s, 1)
	startSegmentVendor(t, s, "order")
	nc := natstest.Conn(t, s)

	msg := vendtest.RequestEnc(t, nc, "leaf.snowflake", vending.EncodingBinary, "1000")
	got, err := vending.DecodeBinary(nil, msg.Data)
	if err != nil || len(got) != 1000 || msg.Header.Get(vending.EncodingHeader) != "" {
		t.Fatalf("binary reply: %d IDs, %v, headers %v", len(got), err, msg.Header)
	}

	// Ranges: a snowflake batch is one run per millisecond, and says so.
	msg = vendtest.RequestEnc(t, nc, "leaf.snowflake", vending.EncodingRanges, "10000")
	rs, err := vending.DecodeRanges(nil, msg.Data)
	if err != nil || ids.Count(rs) != 10000 || msg.Header.Get(vending.EncodingHeader) != vending.EncodingRanges {
		t.Fatalf("snowflake ranges reply: %v, %v, headers %v", rs, err, msg.Header)
	}
	if len(msg.Data) > 16*(10000/4096+5) {
		t.Fatalf("10000 snowflake IDs took %d bytes in %d runs", len(msg.Data), len(rs))
	}

	// A segment batch above the max batch is allowed in ranges, and costs
	// 16 bytes; text or binary are bound by the max batch.
	msg = vendtest.RequestEnc(t, nc, "leaf.segment.order", vending.EncodingRanges, "1000000000")
	rs, err = vending.DecodeRanges(nil, msg.Data)
	if err != nil || len(rs) != 1 || rs[0] != (ids.Range{First: 1, Count: 1e9}) {
		t.Fatalf("segment ranges reply %v, %v", rs, err)
	}
	for _, tc := range []struct{ subject, enc, body string }{
		{"leaf.segment.order", vending.EncodingRanges, "1000000001"},
		{"leaf.segment.order", vending.EncodingText, "10001"},
		{"leaf.segment.order", vending.EncodingBinary, "10001"},
		{"leaf.snowflake", vending.EncodingRanges, "10001"},
		{"leaf.snowflake", "protobuf", "1"},
		{"leaf.segment.order", "Ranges", "1"},
	} {
		msg := vendtest.RequestEnc(t, nc, tc.subject, tc.enc, tc.body)
		if code := msg.Header.Get(micro.ErrorCodeHeader); code != "400" {
			t.Fatalf("%s %s %s: code %q, want 400", tc.subject, tc.enc, tc.body, code)
		}
	}
	// Refused requests took nothing: the next ID follows the billion.
	msg = vendtest.RequestEnc(t, nc, "leaf.segment.order", vending.EncodingText, "")
	if string(msg.Data) != "1000000001" {
		t.Fatalf("after refused requests: %q, want 1000000001", msg.Data)
	}
	if e := vendtest.RequestEnc(t, nc, "leaf.snowflake", "protobuf", "1").Header.Get(micro.ErrorHeader); !strings.Contains(e, "use text, binary or ranges") {
		t.Fatalf("bad encoding says %q", e)
	}
}

func TestMicroDiscovery(t *testing.T) {
	s := natstest.Server(t)
	startVendor(t, s, 1)
	nc := natstest.Conn(t, s)
	msg := vendtest.Request(t, nc, "$SRV.INFO.leaf", "")
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	subjects := map[string]string{}
	for _, e := range info.Endpoints {
		subjects[e.Subject] = e.QueueGroup
	}
	for _, want := range []string{"leaf.snowflake", "leaf.snowflake.decode"} {
		if qg, ok := subjects[want]; !ok || qg != "leaf" {
			t.Fatalf("endpoints %v: want %s in queue group leaf", subjects, want)
		}
	}
}

func TestStartValidates(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	g, _ := snowflake.New(snowflake.Settings{})
	for _, c := range []vending.Config{
		{},
		{Snowflake: g, Prefix: "leaf.*"},
		{Snowflake: g, MaxBatch: -1},
		{Snowflake: g, ReplyPrefixes: []string{"$KV."}},
		{Snowflake: g, ReplyPrefixes: []string{"leaf.replies."}},
		{Snowflake: g, ReplyPrefixes: []string{"_INBOX"}},
		{Snowflake: g, ReplyPrefixes: []string{"in box."}},
	} {
		if svc, err := vending.Open(nc, c); err == nil {
			svc.Close(context.Background())
			t.Fatalf("Start(%+v) accepted", c)
		}
	}
}

// slowSegments makes every request wait for the store until released.
type slowSegments struct {
	normalTags
	entered chan struct{}
	release chan struct{}
}

var _ vending.Segments = (*slowSegments)(nil)

func (s *slowSegments) TryTakeRanges(string, []ids.Range, int64) ([]ids.Range, bool, error) {
	return nil, false, nil
}

func (s *slowSegments) TakeRanges(ctx context.Context, _ string, dst []ids.Range, n int64) ([]ids.Range, error) {
	s.entered <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return dst, ctx.Err()
	}
	return append(dst, ids.Range{First: 100, Count: n}), nil
}

// failingSegments waits for the store, which fails.
type failingSegments struct{ normalTags }

func (failingSegments) TryTakeRanges(string, []ids.Range, int64) ([]ids.Range, bool, error) {
	return nil, false, nil
}

func (failingSegments) TakeRanges(_ context.Context, tag string, dst []ids.Range, _ int64) ([]ids.Range, error) {
	return dst, &segment.TagError{Tag: tag, Err: segment.ErrUnavailable}
}

// A request answered after its handler returned (it waited for the store)
// gets the same error reply as one answered at once, in every encoding;
// under -race this also checks that the late answer leaves micro's request
// alone.
func TestSlowRequestErrors(t *testing.T) {
	s := natstest.Server(t)
	svc, err := vending.Open(natstest.Conn(t, s), vending.Config{Segments: failingSegments{}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	nc := natstest.Conn(t, s)
	for _, enc := range []string{vending.EncodingText, vending.EncodingRanges} {
		for range 20 {
			msg := vendtest.RequestEnc(t, nc, "leaf.segment.order", enc, "5")
			desc := msg.Header.Get(micro.ErrorHeader)
			if msg.Header.Get(micro.ErrorCodeHeader) != "503" || desc == "" || string(msg.Data) != desc {
				t.Fatalf("%s: headers %v, body %q; want a 503 with its sentence as the body", enc, msg.Header, msg.Data)
			}
		}
	}
}

// A request waiting for the store when Stop begins still gets its IDs.
func TestStopAnswersRequestsInFlight(t *testing.T) {
	s := natstest.Server(t)
	src := &slowSegments{entered: make(chan struct{}, 1), release: make(chan struct{})}
	svc, err := vending.Open(natstest.Conn(t, s), vending.Config{Segments: src})
	if err != nil {
		t.Fatal(err)
	}
	nc := natstest.Conn(t, s)
	reply := make(chan *nats.Msg, 1)
	go func() {
		msg, err := nc.Request("leaf.segment.order", []byte("2"), 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		reply <- msg
	}()
	<-src.entered
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Close(context.Background()) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a request was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(src.release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	msg := <-reply
	if msg == nil || string(msg.Data) != "100\n101" {
		t.Fatalf("in-flight request answered %v, want IDs 100 and 101", msg)
	}
}

// recorder is an Observer that keeps what it is told.
// A reply larger than the server's max_payload cannot be sent: the client
// gets a 500 that says why instead of a timeout, and the request counts as
// an error, not as IDs, in the metrics and in micro stats.
func TestReplyAboveMaxPayloadIsAnError(t *testing.T) {
	s := natstest.ServerWith(t, natsserver.Config{Configure: func(o *server.Options) { o.MaxPayload = 4096 }})
	g, err := snowflake.New(snowflake.Settings{WorkerID: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec := &vendtest.Recorder{}
	svc, err := vending.Open(natstest.Conn(t, s), vending.Config{Snowflake: g, MaxBatch: 10000, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	nc := natstest.Conn(t, s)
	msg := vendtest.Request(t, nc, "leaf.snowflake", "1000") // about 19 KB of text
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "500" || !strings.Contains(msg.Header.Get(micro.ErrorHeader), "max_payload of 4096") {
		t.Fatalf("reply %v %.80q, want a 500 naming max_payload", msg.Header, msg.Data)
	}
	if msg := vendtest.Request(t, nc, "leaf.snowflake", "100"); msg.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("100 IDs (2 KB) refused: %v", msg.Header)
	}
	codes, ids := rec.Seen(2)
	if len(codes) != 2 || codes[0] != vending.CodeInternal || ids != 100 {
		t.Fatalf("observed codes %v and %d IDs, want a 500, then the 100 IDs sent", codes, ids)
	}
	stats := microStats(t, nc, 2)
	if stats.NumErrors != 1 {
		t.Fatalf("micro stats count %d errors, want 1", stats.NumErrors)
	}
}

// microStats returns the snowflake endpoint's stats of the one vendor once
// they count the requests wanted, or after five seconds: micro counts a
// request just after its reply has gone.
func microStats(t *testing.T, nc *nats.Conn, requests int) micro.EndpointStats {
	t.Helper()
	var stats micro.EndpointStats
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		msg, err := nc.Request("$SRV.STATS.leaf", nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var st micro.Stats
		if err := json.Unmarshal(msg.Data, &st); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ep := range st.Endpoints {
			if ep.Name == "snowflake" {
				stats, found = *ep, true
			}
		}
		if !found {
			t.Fatalf("no snowflake endpoint in %s", msg.Data)
		}
		if stats.NumRequests >= requests || time.Now().After(deadline) {
			return stats
		}
	}
}

// strictCounter is counterSegments whose tags named strict-* are strict.
type strictCounter struct{ *counterSegments }

func (strictCounter) IsStrict(tag string) bool { return strings.HasPrefix(tag, "strict-") }

// A strict tag's replies say so in every encoding, on the fast and the slow
// path; a normal tag's carry no such header.
func TestStrictTagRepliesSaySo(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	svc, err := vending.Open(nc, vending.Config{Segments: strictCounter{newCounterSegments("strict-orders", "orders")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	for _, tag := range []string{"strict-orders", "orders"} {
		for _, enc := range []string{vending.EncodingText, vending.EncodingBinary, vending.EncodingRanges} {
			msg := vendtest.RequestEnc(t, nc, "leaf.segment."+tag, enc, "3")
			want := ""
			if tag == "strict-orders" {
				want = "true"
			}
			if got := msg.Header.Get(vending.StrictHeader); got != want || msg.Header.Get(micro.ErrorCodeHeader) != "" {
				t.Errorf("%s in %s: %s %q, want %q (headers %v)", tag, enc, vending.StrictHeader, got, want, msg.Header)
			}
		}
	}
}

// tagSegments waits for the store for every tag: "down" finds it down, any
// other tag is unknown, and "order" has IDs.
type tagSegments struct{ normalTags }

var _ vending.Segments = tagSegments{}

func (tagSegments) TryTakeRanges(string, []ids.Range, int64) ([]ids.Range, bool, error) {
	return nil, false, nil
}

func (tagSegments) TakeRanges(_ context.Context, tag string, dst []ids.Range, n int64) ([]ids.Range, error) {
	switch tag {
	case "order":
		return append(dst, ids.Range{First: 1, Count: n}), nil
	case "down":
		return dst, &segment.TagError{Tag: tag, Err: segment.ErrUnavailable}
	}
	return dst, &segment.TagError{Tag: tag, Err: segment.ErrUnknownTag}
}

// Requests answered after waiting for the store count once in micro
// stats, as answered when they were dispatched, and with their codes for
// the Observer (the metrics).
func TestSlowRepliesCountInMicroStats(t *testing.T) {
	s := natstest.Server(t)
	rec := &vendtest.Recorder{}
	svc, err := vending.Open(natstest.Conn(t, s), vending.Config{Segments: tagSegments{}, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	nc := natstest.Conn(t, s)
	for tag, code := range map[string]string{"order": "", "down": "503", "nosuch": "404"} {
		for range 3 {
			msg := vendtest.Request(t, nc, "leaf.segment."+tag, "2")
			if got := msg.Header.Get(micro.ErrorCodeHeader); got != code {
				t.Fatalf("%s: code %q, want %q (%s)", tag, got, code, msg.Data)
			}
		}
	}
	var st micro.Stats
	if err := json.Unmarshal(vendtest.Request(t, nc, "$SRV.STATS.leaf", "").Data, &st); err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int{}
	for _, ep := range st.Endpoints {
		got[ep.Name] = [2]int{ep.NumRequests, ep.NumErrors}
	}
	if len(got) != 1 || got[vending.EndpointSegment] != [2]int{9, 0} {
		t.Fatalf("micro stats (requests, errors) %v; want the 9 segment requests once", got)
	}
	codes, _ := rec.Seen(9)
	observedErrors := 0
	for _, c := range codes {
		if c != vending.CodeOK {
			observedErrors++
		}
	}
	if observedErrors != 6 {
		t.Fatalf("the observer saw %d errors, want 6", observedErrors)
	}
}

// Service and endpoints describe the API in `nats micro info leaf`.
func TestMicroInfoDescribesTheAPI(t *testing.T) {
	s := natstest.Server(t)
	g, _ := snowflake.New(snowflake.Settings{WorkerID: 1})
	svc, err := vending.Open(natstest.Conn(t, s), vending.Config{Snowflake: g, Segments: tagSegments{}, MaxBatch: 500,
		Metadata: map[string]string{"worker_ids": "0-1023"}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	var info micro.Info
	if err := json.Unmarshal(vendtest.Request(t, natstest.Conn(t, s), "$SRV.INFO.leaf", "").Data, &info); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"max_batch", "encodings", "encoding_header", "errors", "prefix", "worker_ids"} {
		if info.Metadata[k] == "" {
			t.Errorf("service metadata lacks %s: %v", k, info.Metadata)
		}
	}
	for _, ep := range info.Endpoints {
		if len(ep.Metadata) == 0 {
			t.Errorf("endpoint %s has no metadata", ep.Name)
		}
		if ep.Name == vending.EndpointSegment && (!strings.Contains(ep.Metadata["subject"], "leaf.segment.<tag>: a tag of "+segment.TagSyntax) || ep.Metadata["max_batch"] != "500") {
			t.Errorf("segment endpoint metadata %v", ep.Metadata)
		}
	}
}

// ClusterStats gathers every vendor's stats, and fails when NATS refuses
// the request rather than answering a cluster of none.
func TestClusterStats(t *testing.T) {
	s := natstest.ServerWith(t, natsserver.Config{Configure: func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "free", Password: "pw"},
			{Username: "denied", Password: "pw", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Deny: []string{"$SRV.STATS.leaf"}},
			}},
		}
	}})
	for id := range 2 {
		g, err := snowflake.New(snowflake.Settings{WorkerID: id + 1})
		if err != nil {
			t.Fatal(err)
		}
		svc, err := vending.Open(natstest.Conn(t, s, nats.UserInfo("free", "pw")), vending.Config{Snowflake: g})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close(context.Background()) })
	}
	stats, err := vending.ClusterStats(natstest.Conn(t, s, nats.UserInfo("free", "pw")), 2*time.Second)
	if err != nil || len(stats) != 2 {
		t.Fatalf("ClusterStats: %d answers, %v; want both vendors'", len(stats), err)
	}
	denied := natstest.Conn(t, s, nats.UserInfo("denied", "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if stats, err := vending.ClusterStats(denied, 2*time.Second); err == nil || !strings.Contains(err.Error(), "$SRV.STATS.leaf") {
		t.Fatalf("ClusterStats refused: %d answers, %v; want an error naming the subject", len(stats), err)
	}
}
