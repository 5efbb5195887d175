package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/internal/testtool"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/segment"
)

func TestForeignValuesAreCorrupt(t *testing.T) {
	for _, v := range testtool.ForeignValues {
		if _, err := decodeSegmentRow([]byte(v)); err == nil {
			t.Errorf("decodeSegmentRow(%q) accepted", v)
		}
		if _, err := decodeStoreRecord([]byte(v)); err == nil {
			t.Errorf("decodeStoreRecord(%q) accepted", v)
		}
	}
}

func seedForeign(f *testing.F, valid ...string) {
	for _, v := range append(testtool.ForeignValues, valid...) {
		f.Add([]byte(v))
	}
}

// roundTrip checks that what a decoder accepted is what a vendor writes:
// encoded again, it decodes to the same value.
func roundTrip[T comparable](t *testing.T, got T, decode func([]byte) (T, error)) {
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	again, err := decode(b)
	if err != nil || again != got {
		t.Fatalf("%+v encodes to %s, which decodes to %+v, %v", got, b, again, err)
	}
}

func FuzzDecodeSegmentRow(f *testing.F) {
	seedForeign(f, `{"max_id":1001,"step":1000,"update_time":"2026-11-22T06:06:44Z"}`, `{"max_id":5,"step":0,"deleted":true,"update_time":"2026-11-22T06:06:44Z"}`)
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := decodeSegmentRow(v)
		if err != nil {
			return
		}
		if r.MaxID < 1 || r.Step < 0 || (r.Step < 1 && !r.Deleted) || segment.ValidateStep(max(r.Step, 1)) != nil {
			t.Fatalf("decodeSegmentRow(%q) = %+v", v, r)
		}
		roundTrip(t, r, decodeSegmentRow)
	})
}

func FuzzDecodeStoreRecord(f *testing.F) {
	seedForeign(f, `{"id":"0123abcd","created":"2026-11-22T06:06:44Z"}`)
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := decodeStoreRecord(v)
		if err != nil {
			return
		}
		if r.ID == "" || r.Created.IsZero() {
			t.Fatalf("decodeStoreRecord(%q) = %+v", v, r)
		}
		roundTrip(t, r, decodeStoreRecord)
	})
}

// TestCorruptRowsInTheBucket: a corrupt row is an error naming the repair,
// the other tags serve, and the repair (tags raise) serves it again.
func TestCorruptRowsInTheBucket(t *testing.T) {
	s := natstest.Server(t)
	js := kv.Plain(natstest.JetStream(t, s))
	ctx := context.Background()
	st, err := New(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"pn", "ok"} {
		if err := st.Create(ctx, segment.Row{Tag: tag, Step: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Alloc(ctx, "pn", 0, nil); err != nil { // handed out 1..10
		t.Fatal(err)
	}
	b, _ := js.KeyValue(ctx, kv.SegmentBucket)
	if _, err := b.Put(ctx, "pn", []byte(testtool.ForeignValues[0])); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Alloc(ctx, "pn", 0, nil); !errors.Is(err, kv.ErrCorrupt) || !strings.Contains(err.Error(), "vendor tags raise pn") {
		t.Fatalf("Alloc of a corrupt row: %v, want kv.ErrCorrupt naming the repair", err)
	}
	if r, err := st.Alloc(ctx, "ok", 0, nil); err != nil || r.MaxID != 11 {
		t.Fatalf("Alloc of another tag: %+v, %v", r, err)
	}
	tags, err := st.Tags(ctx)
	if err != nil || len(tags) != 2 {
		t.Fatalf("Tags = %+v, %v; want both tags, the corrupt one too", tags, err)
	}
	rows, err := st.List(ctx)
	if !errors.Is(err, kv.ErrCorrupt) || len(rows) != 1 || rows[0].Tag != "ok" {
		t.Fatalf("List = %+v, %v; want the good row and kv.ErrCorrupt", rows, err)
	}
	if err := st.Raise(ctx, segment.Row{Tag: "pn", MaxID: 11, Step: 10}); err != nil {
		t.Fatalf("Raise of a corrupt row: %v", err)
	}
	if r, err := st.Alloc(ctx, "pn", 0, nil); err != nil || r.MaxID != 21 {
		t.Fatalf("Alloc after the repair = %+v, %v; want the segment 11..20", r, err)
	}

}
