package testtool

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// The seeded simulations' settings: SeedEnv replays one seed alone;
// FreshSeedEnv names the fresh seed a run adds to the fixed ones
// (scripts/test.sh draws it and prints it before the tests run).
const (
	SeedEnv      = "LEAF_SIM_SEED"
	FreshSeedEnv = "LEAF_SIM_FRESH_SEED"
)

// SimSeeds returns the seeds a seeded simulation runs (issue 30): the one
// LEAF_SIM_SEED names, alone; or the fixed seeds, which every run repeats,
// and one fresh seed, LEAF_SIM_FRESH_SEED or drawn at random, so that
// every run also tries a schedule no run tried before. It logs the fresh
// seed with the command that replays it: LEAF_SIM_SEED=<seed> and replay,
// a go test command that runs the simulation. A seed is below 2^48, to be
// typed.
func SimSeeds(t testing.TB, fixed []uint64, replay string) []uint64 {
	t.Helper()
	if s := os.Getenv(SeedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a seed, a whole number", SeedEnv, s)
		}
		return []uint64{seed}
	}
	fresh := rand.Uint64N(1 << 48)
	if s := os.Getenv(FreshSeedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a seed, a whole number", FreshSeedEnv, s)
		}
		fresh = seed
	}
	t.Logf("seeds: %v and the fresh seed %d; replay it with: %s=%d %s", fixed, fresh, SeedEnv, fresh, replay)
	return append(fixed[:len(fixed):len(fixed)], fresh)
}
