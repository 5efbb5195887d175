package segment_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/leaf-nats/leaf/segment"
)

// The regions' blocks cover the positive IDs without overlap, and a
// region's allocator hands out its own block only: a row outside it (the
// store of another region, or of none) is refused, naming the fix, and a
// tag ends at the end of the block, not in the next region's.
func TestRegionBlocks(t *testing.T) {
	next := int64(1)
	for r := 0; r <= segment.MaxRegionID; r++ {
		b, err := segment.RegionBlock(r)
		if err != nil || b.First != next || b.End <= b.First {
			t.Fatalf("region %d: %+v, %v; want a block from %d", r, b, err, next)
		}
		if segment.RegionOf(b.First) != r || segment.RegionOf(b.End-1) != r {
			t.Fatalf("region %d's block [%d, %d) is not all RegionOf %d", r, b.First, b.End, r)
		}
		next = b.End
	}
	if next != math.MaxInt64 {
		t.Fatalf("the blocks end at %d, want the largest int64", next)
	}
	if _, err := segment.RegionBlock(8); err == nil {
		t.Fatal("region 8 has a block")
	}

	west, _ := segment.RegionBlock(1)
	store := newFakeStore(100, "fresh", "moved", "end")
	store.set(func(f *fakeStore) {
		f.rows["moved"] = segment.Row{Tag: "moved", MaxID: west.First, Step: 100}
		f.rows["end"] = segment.Row{Tag: "end", MaxID: west.End - 150, Step: 100}
	})
	a := open(t, store, segment.Options{Block: west})
	_, err := a.Take(context.Background(), "fresh", nil, 1)
	if !errors.Is(err, segment.ErrOtherRegion) || !strings.Contains(err.Error(), "vendor tags raise fresh -to 1152921504606846976") {
		t.Fatalf("a row at 1 in region 1: %v, want ErrOtherRegion naming the raise", err)
	}
	if ids := take(t, a, "moved", 3); ids[0] != west.First || segment.RegionOf(ids[2]) != 1 {
		t.Fatalf("region 1's IDs: %v, want from %d", ids, west.First)
	}
	ids := take(t, a, "end", 150)
	if ids[len(ids)-1] != west.End-1 {
		t.Fatalf("the last IDs of the block: ...%d, want up to %d", ids[len(ids)-1], west.End-1)
	}
	if _, err := a.Take(context.Background(), "end", nil, 1); !errors.Is(err, segment.ErrExhausted) {
		t.Fatalf("past the block's end: %v, want ErrExhausted", err)
	}
}
