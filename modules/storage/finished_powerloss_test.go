package storage

import (
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
)

// finRoundResult is what one finished-offsets power-loss round saw.
type finRoundResult struct {
	plResult
	acked int // RecordFinished calls that returned nil before the power loss
	lost  int // violations: an acked range missing after reopen
}

// finPowerLossRound runs random RecordFinished, Commit and ClearFinished
// calls (and backward Commits after a clear, as a seek does) on checkpoint
// "d" over a MemFS, loses power at a random filesystem operation, reopens
// what the crash left and checks the property:
//
//   - every range whose RecordFinished returned nil before the power loss,
//     and that no Commit or ClearFinished completed since dropped, is
//     recorded after the reopen (at or past the reopened offset);
//   - nothing appears that no RecordFinished was given since the last
//     completed ClearFinished, or that a completed Commit dropped;
//   - the offset is the last completed Commit's or the one in flight;
//   - the reopen never reports corruption: a power loss is crash damage.
func finPowerLossRound(seed uint64, hooks *Hooks) finRoundResult {
	var res finRoundResult
	p := startPowerLossRound(seed, 0x66696e, hooks, plSpans{compact: 512, commitBig: 40, commitSmall: 6, crash: 300, crashOnSync: 40}, &res.plResult)
	if p == nil {
		return res
	}
	rng, c := p.rng, p.c

	var (
		must    []contract.OffsetRange // acked, not dropped since
		allowed []contract.OffsetRange // given since the last completed clear, not dropped by a completed Commit
	)
	for step := 0; step < 60 && !p.crashed(); step++ {
		switch k := rng.IntN(10); {
		case k < 6: // RecordFinished
			var in []contract.OffsetRange
			n := 1 + rng.IntN(4)
			if rng.IntN(10) == 0 {
				n = 300 + rng.IntN(1500) // several records
			}
			lo := p.offset
			for i := 0; i < n; i++ {
				lo += int64(rng.IntN(6))
				hi := lo + 1 + int64(rng.IntN(4))
				in = append(in, contract.OffsetRange{Lo: lo, Hi: hi})
				if rng.IntN(3) == 0 {
					lo = p.offset + int64(rng.IntN(int(hi-p.offset)+1)) // overlaps and repeats
				} else {
					lo = hi
				}
			}
			norm := normalizeRanges(in)
			allowed = mergeRanges(allowed, norm)
			err := c.RecordFinished(in)
			if p.crashed() {
				break // in flight at the power loss: may or may not be there
			}
			if err != nil {
				res.fail("RecordFinished: %v", err)
				return res
			}
			must = mergeRanges(must, norm)
			res.acked++
		case k < 9: // Commit forward
			ok, stop := p.commitForward()
			if stop {
				return res
			}
			if ok {
				must, allowed = trimRanges(must, p.offset), trimRanges(allowed, p.offset)
			}
		default: // ClearFinished, then now and then a Commit back (a seek)
			if p.clearAndSeek(func() { must, allowed = nil, nil }) {
				return res
			}
		}
	}

	c2 := p.reopen()
	if c2 == nil {
		return res
	}
	got, reo := c2.Finished(), c2.Offset()
	if p.checkFinished(got, allowed, must, reo, "recorded") {
		res.lost++
	}
	for i, r := range got {
		if r.Lo < reo || r.Lo >= r.Hi || (i > 0 && r.Lo <= got[i-1].Hi) {
			res.fail("Finished after reopen %v: not ascending, disjoint, non-adjacent at or past offset %d", got, reo)
			break
		}
	}
	return res
}

func finRounds() int {
	if isLong() {
		return 5000
	}
	return 400
}

// TestFinishedPowerLossProperty: random RecordFinished, Commit and
// ClearFinished sequences on a MemFS, a power loss at a random point
// (most rounds right before an fsync), under every crash model: what
// RecordFinished acknowledged and nothing dropped is there after the
// reopen, nothing never recorded appears, the offset is a committed one,
// and no crash is reported as corruption.
func TestFinishedPowerLossProperty(t *testing.T) {
	acked, cut, rewrites := 0, 0, 0
	forPowerLossSeeds(1_300_000, finRounds(), func(_ int, seed uint64, model string) bool {
		res := finPowerLossRound(seed, nil)
		reportViolations(t, seed, model, res.violations)
		acked, cut, rewrites = acked+res.acked, cut+res.cut, rewrites+res.rewrites
		return true
	})
	t.Logf("%d rounds, %d acknowledged RecordFinished calls, %d rewrites, %d reopens cut a torn append", finRounds(), acked, rewrites, cut)
	if acked == 0 || cut == 0 || rewrites == 0 {
		t.Fatal("the property was not exercised: want acknowledged calls, rewrites and torn appends cut")
	}
}

// TestFinishedPowerLossNegativeControl: with the fsync of RecordFinished's
// appends deliberately skipped (Hooks.SkipFinishedSync) the same property
// must fail: acknowledged ranges are lost under the synced-only, torn-tail
// and sector models alike. It proves the property test depends on that
// fsync.
func TestFinishedPowerLossNegativeControl(t *testing.T) {
	lostBy := map[string]int{}
	rounds := forPowerLossSeeds(1_400_000, 4*finRounds(), func(r int, seed uint64, model string) bool {
		res := finPowerLossRound(seed, &Hooks{SkipFinishedSync: true})
		lostBy[model] += res.lost
		reportUnexpected(t, seed, model, res.violations, plFinLost)
		return r < finRounds() || lostBy["synced-only"] == 0 || lostBy["torn-tail"] == 0 || lostBy["sectors-512"] == 0
	})
	t.Logf("SkipFinishedSync: %d rounds; rounds losing acknowledged ranges per model: %v", rounds, lostBy)
	wantLostUnder(t, lostBy, "RecordFinished")
}
