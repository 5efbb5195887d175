package snowflake

import "fmt"

// Regions split a layout's worker IDs into equal blocks, one per region
// (LEAF_REGION_ID), so that regions that never talk to each other never
// hold the same worker ID: every snowflake ID names its region, and two
// regions cannot make the same ID. The default layout's 1024 worker IDs
// make 8 blocks of 128; js53's 16 make 4 blocks of 4.

// RegionBits is how many high bits of a worker ID name its region.
func (l Layout) RegionBits() int {
	if l == LayoutJS53 {
		return 2
	}
	return 3
}

// MaxRegionID is the largest region ID the layout holds.
func (l Layout) MaxRegionID() int { return 1<<l.RegionBits() - 1 }

// RegionWorkers returns the worker IDs of region, first and last: the
// region's block.
func (l Layout) RegionWorkers(region int) (first, last int, err error) {
	if region < 0 || region > l.MaxRegionID() {
		return 0, 0, fmt.Errorf("snowflake: region ID %d is outside 0..%d of layout %s", region, l.MaxRegionID(), l.Name())
	}
	size := (l.MaxWorkerID() + 1) >> l.RegionBits()
	return region * size, (region+1)*size - 1, nil
}

// RegionOf returns the region whose block holds workerID.
func (l Layout) RegionOf(workerID int) int {
	return workerID >> (l.WorkerBits() - l.RegionBits())
}
