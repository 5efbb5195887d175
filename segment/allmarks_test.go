package segment_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leaf-nats/leaf/segment"
)

// plainMarks are marks that cannot be lowered.
type plainMarks struct{ m *fakeMarks }

var _ segment.Marks = plainMarks{}

func (p plainMarks) Mark(ctx context.Context, tag string) (int64, error) { return p.m.Mark(ctx, tag) }
func (p plainMarks) Record(ctx context.Context, tag string, end int64) error {
	return p.m.Record(ctx, tag, end)
}
func (p plainMarks) Settle(tag string, end int64, committed bool) { p.m.Settle(tag, end, committed) }

// Marks kept in two places: a store started over, with one of them lost
// with it (marks kept in the store's own JetStream), is raised above the
// other; every segment is recorded in both before it is served; and a
// place that cannot say makes no allocation blind.
func TestAllMarks(t *testing.T) {
	inStore, beside := &fakeMarks{marks: map[string]int64{}}, &fakeMarks{marks: map[string]int64{}}
	store := newFakeStore(100, "order")
	a := open(t, store, segment.Options{Marks: segment.AllMarks{inStore, beside}})
	ids := take(t, a, "order", 150)
	nextReady(t, a, "order")
	if inStore.marks["order"] != beside.marks["order"] || beside.marks["order"] < ids[len(ids)-1]+1 {
		t.Fatalf("marks %d and %d after IDs up to %d, want both above them", inStore.marks["order"], beside.marks["order"], ids[len(ids)-1])
	}
	handed := beside.marks["order"]

	// The store and the marks in it wiped: a fresh row, no mark there.
	fresh := newFakeStore(100, "order")
	lost := &fakeMarks{marks: map[string]int64{}}
	b := open(t, fresh, segment.Options{Marks: segment.AllMarks{lost, beside}})
	if got := take(t, b, "order", 1); got[0] < handed {
		t.Fatalf("after the store was wiped: ID %d, want %d or above", got[0], handed)
	}
	if n, rw := b.Rewinds(); n != 1 || rw.Store != 1 {
		t.Fatalf("rewinds %d, %+v; want the fresh store found behind, once", n, rw)
	}
	if lost.marks["order"] != beside.marks["order"] {
		t.Fatalf("the segment is not recorded in both: %d and %d", lost.marks["order"], beside.marks["order"])
	}

	lost.mu.Lock()
	lost.failing = true
	lost.mu.Unlock()
	c := open(t, fresh, segment.Options{Marks: segment.AllMarks{lost, beside}})
	if _, err := c.Take(context.Background(), "order", nil, 1); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("with one place unreadable: %v, want ErrUnavailable", err)
	}
}

// Lower lowers every place, and gives nothing back when one of them
// cannot be lowered.
func TestAllMarksLower(t *testing.T) {
	ctx := context.Background()
	x, y := &fakeMarks{marks: map[string]int64{"order": 200}}, &fakeMarks{marks: map[string]int64{"order": 200}}
	if done, err := (segment.AllMarks{x, y}).Lower(ctx, "order", 200, 150); !done || err != nil {
		t.Fatalf("Lower: %v, %v", done, err)
	}
	if x.marks["order"] != 150 || y.marks["order"] != 150 {
		t.Fatalf("marks %d and %d, want 150", x.marks["order"], y.marks["order"])
	}
	if done, _ := (segment.AllMarks{x, y}).Lower(ctx, "order", 200, 100); done {
		t.Fatal("lowered from a mark that moved on")
	}
	if done, _ := (segment.AllMarks{x, plainMarks{y}}).Lower(ctx, "order", 150, 100); done {
		t.Fatal("gave back though one place cannot be lowered")
	}
}
