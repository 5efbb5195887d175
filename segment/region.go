package segment

import (
	"fmt"
	"math"
)

// Regions (LEAF_REGION_ID) own disjoint blocks of the positive int64s: a
// tag's IDs in region r are in [r·2^60, (r+1)·2^60), region 0's from 1, so
// that two regions, each with its own store, never hand out the same ID,
// even if they never talk. Within its block a region's IDs are a tag's
// usual ascending segments. A vendor with no region serves the whole space.

// MaxRegionID is the largest region ID: eight blocks, by the three bits
// below the sign bit.
const MaxRegionID = 7

// regionShift places a region's block: its ID's top bits below the sign.
const regionShift = 60

// Block is the IDs [First, End) a store's tags hand out: a region's, or
// Whole.
type Block struct {
	First, End int64
}

// Whole is every positive ID: the block of a vendor with no region.
var Whole = Block{First: 1, End: math.MaxInt64}

// RegionBlock returns region's block of IDs.
func RegionBlock(region int) (Block, error) {
	if region < 0 || region > MaxRegionID {
		return Block{}, fmt.Errorf("segment: region ID %d is outside 0..%d", region, MaxRegionID)
	}
	b := Block{First: max(1, int64(region)<<regionShift), End: math.MaxInt64}
	if region < MaxRegionID {
		b.End = int64(region+1) << regionShift
	}
	return b, nil
}

// RegionOf returns the region whose block holds id.
func RegionOf(id int64) int { return int(id >> regionShift) }

// Grant is how many IDs an allocation of step from max_id base gives when
// max_id may reach end at most: step, or what is left below end when that
// is less; 0 when the tag's IDs are used up. Stores use it so that every ID
// up to the end can be handed out.
func Grant(base, step, end int64) int64 {
	return max(0, min(step, end-base))
}

// check reports whether a row's max_id can be the block's: IDs below it
// were handed out from it, so it is from First (a new tag) to End (used
// up).
func (b Block) check(tag string, maxID int64) error {
	switch {
	case b == Whole || maxID >= b.First && maxID <= b.End:
		return nil
	case maxID < b.First:
		return fmt.Errorf("%w: tag %q has max_id %d, below this region's IDs, which start at %d: the store was another region's, or had no region; "+
			"if no other region serves from it, move the tag into this region with: vendor tags raise %s -to %d", ErrOtherRegion, tag, maxID, b.First, tag, b.First)
	}
	return fmt.Errorf("%w: tag %q has max_id %d, past this region's IDs, which end at %d: the store is another region's (check LEAF_POSTGRES_URL and LEAF_REGION_ID)",
		ErrOtherRegion, tag, maxID, b.End-1)
}
