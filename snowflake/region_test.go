package snowflake_test

import (
	"testing"

	"github.com/leaf-nats/leaf/snowflake"
)

// Each layout's regions split its worker IDs into equal blocks that cover
// them all, and a worker ID's region is the one whose block holds it.
func TestRegionBlocks(t *testing.T) {
	for _, l := range snowflake.Layouts() {
		next := 0
		for r := 0; r <= l.MaxRegionID(); r++ {
			first, last, err := l.RegionWorkers(r)
			if err != nil || first != next || last < first {
				t.Fatalf("%s region %d: %d-%d, %v; want a block from %d", l.Name(), r, first, last, err, next)
			}
			for _, id := range []int{first, last} {
				if got := l.RegionOf(id); got != r {
					t.Fatalf("%s: worker ID %d is in region %d's block, RegionOf says %d", l.Name(), id, r, got)
				}
			}
			next = last + 1
		}
		if next != l.MaxWorkerID()+1 {
			t.Fatalf("%s: the regions' blocks end at %d, want %d", l.Name(), next-1, l.MaxWorkerID())
		}
		if _, _, err := l.RegionWorkers(l.MaxRegionID() + 1); err == nil {
			t.Fatalf("%s: region %d has a block", l.Name(), l.MaxRegionID()+1)
		}
	}
	if first, last, _ := snowflake.LayoutDefault.RegionWorkers(1); first != 128 || last != 255 {
		t.Fatalf("default layout, region 1: %d-%d, want 128-255", first, last)
	}
	if first, last, _ := snowflake.LayoutJS53.RegionWorkers(3); first != 12 || last != 15 {
		t.Fatalf("js53, region 3: %d-%d, want 12-15", first, last)
	}
}
