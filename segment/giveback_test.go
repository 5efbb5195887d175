package segment_test

import (
	"context"
	"testing"

	"github.com/leaf-nats/leaf/segment"
)

// Lower implements segment.Lowerer.
func (m *fakeMarks) Lower(_ context.Context, tag string, from, to int64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.marks[tag] != from {
		return false, nil
	}
	m.marks[tag] = to
	return true, nil
}

// A clean stop gives the unused top of a tag back: the next allocator
// hands out the next ID, with none skipped and none repeated; its marks
// went down with the store, so nothing reads as a store gone back.
func TestGiveBackAtClose(t *testing.T) {
	store := newFakeStore(100, "order")
	marks := &fakeMarks{marks: map[string]int64{}}
	a := open(t, store, segment.Options{Marks: marks, GiveBack: true})
	first := take(t, a, "order", 15) // 1..15, the next segment preloaded
	nextReady(t, a, "order")
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := store.rows["order"].MaxID; got != 16 || marks.marks["order"] != 16 {
		t.Fatalf("after a clean stop at ID %d: max_id %d, mark %d; want both 16", first[len(first)-1], got, marks.marks["order"])
	}
	b := open(t, store, segment.Options{Marks: marks, GiveBack: true})
	if got := take(t, b, "order", 1); got[0] != 16 {
		t.Fatalf("the next start hands out %d, want 16", got[0])
	}
	if n, _ := b.Rewinds(); n != 0 {
		t.Fatalf("%d rewinds after a give-back, want none", n)
	}
}

// Only the top can go back: an allocator whose segments another one
// allocated after gives nothing back, and neither does one whose mark moved
// on, or a strict tag's.
func TestGiveBackOnlyTheTop(t *testing.T) {
	store := newFakeStore(100, "order", "ledger")
	store.rows["ledger"] = segment.Row{Tag: "ledger", MaxID: 1, Step: 100, Strict: true}
	marks := &fakeMarks{marks: map[string]int64{}}
	a := open(t, store, segment.Options{Marks: marks, GiveBack: true})
	b := open(t, store, segment.Options{Marks: marks, GiveBack: true})
	take(t, a, "order", 5)
	take(t, b, "order", 5) // allocated after a's
	if _, err := a.TakeStrict(context.Background(), "ledger", nil, 3); err != nil {
		t.Fatal(err)
	}
	top := store.rows["order"].MaxID
	a.Close(context.Background())
	if got := store.rows["order"].MaxID; got != top {
		t.Fatalf("a gave back below b's segment: max_id %d, was %d", got, top)
	}
	if got := store.rows["ledger"].MaxID; got != 101 {
		t.Fatalf("a strict tag's IDs went back: max_id %d", got)
	}
	marks.mu.Lock()
	marks.marks["order"] += 1000 // a vendor that allocated and has not written its row yet
	marks.mu.Unlock()
	b.Close(context.Background())
	if got := store.rows["order"].MaxID; got != top {
		t.Fatalf("b gave back though the mark moved on: max_id %d, was %d", got, top)
	}
}
