// Package allocs measures allocations per call for tests that compare two
// code paths (tracing off against no tracing, an observer against none).
package allocs

import (
	"math"
	"runtime"
)

// Least returns the least of rounds means of the allocations of one call
// of f, each over runs calls after a collection and a warm-up of 20
// calls, on one P. Unlike testing.AllocsPerRun the mean is not rounded:
// the count is of every allocation in the process, and a collection during
// a round (which empties the pools), a background goroutine or, under the
// race detector, sync.Pool's deliberate random drops only ever add some,
// so the least mean is the path's own cost and two equal paths differ by
// a few hundredths, where one more allocation per call adds 1.
func Least(rounds, runs int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	least := math.Inf(1)
	for range rounds {
		runtime.GC()
		for range 20 {
			f()
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			f()
		}
		runtime.ReadMemStats(&after)
		least = min(least, float64(after.Mallocs-before.Mallocs)/float64(runs))
	}
	return least
}
