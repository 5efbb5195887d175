package main

import (
	"runtime"
	"slices"
	"sync"
)

// countDups sorts ids in place and returns how many are repeats of an
// earlier one. Sorting beats a hash set here: 8 bytes per ID and sequential
// memory access, and the workers' slices are sorted in parallel first.
func countDups(ids []int64) int {
	sortParallel(ids, runtime.GOMAXPROCS(0))
	dups := 0
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			dups++
		}
	}
	return dups
}

// sortParallel sorts a in p runs at once, then merges pairs of runs, the
// pairs of each round at once.
func sortParallel(a []int64, p int) {
	if p < 2 || len(a) < 1<<16 {
		slices.Sort(a)
		return
	}
	bounds := make([]int, p+1)
	for i := range bounds {
		bounds[i] = len(a) * i / p
	}
	var wg sync.WaitGroup
	for i := range p {
		wg.Go(func() { slices.Sort(a[bounds[i]:bounds[i+1]]) })
	}
	wg.Wait()
	src, dst := a, make([]int64, len(a))
	for len(bounds) > 2 {
		merged := []int{0}
		for i := 0; i+1 < len(bounds); i += 2 {
			if i+2 >= len(bounds) { // an odd run out: carried over
				lo, hi := bounds[i], bounds[i+1]
				copy(dst[lo:hi], src[lo:hi])
				merged = append(merged, hi)
				continue
			}
			lo, mid, hi := bounds[i], bounds[i+1], bounds[i+2]
			wg.Go(func() { merge(dst[lo:hi], src[lo:mid], src[mid:hi]) })
			merged = append(merged, hi)
		}
		wg.Wait()
		src, dst, bounds = dst, src, merged
	}
	if &src[0] != &a[0] {
		copy(a, src)
	}
}

func merge(dst, x, y []int64) {
	i, j, k := 0, 0, 0
	for i < len(x) && j < len(y) {
		if x[i] <= y[j] {
			dst[k] = x[i]
			i++
		} else {
			dst[k] = y[j]
			j++
		}
		k++
	}
	k += copy(dst[k:], x[i:])
	copy(dst[k:], y[j:])
}
