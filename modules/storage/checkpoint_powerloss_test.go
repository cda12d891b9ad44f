package storage

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// The harness of the checkpoint power-loss rounds (finished offsets and
// delivery counts): the crash models, a round's checkpoint over a MemFS
// that loses power at a random filesystem operation, the Commit and
// ClearFinished steps both rounds take, the reopen and the checks of
// what every round owes, and the loop over seeds.

// finCrashModels are the power-loss models the checkpoint rounds cycle
// through: the tail models and the sector model.
var finCrashModels = []struct {
	name string
	opts vfs.CrashOptions
}{
	{"synced-only", vfs.CrashOptions{}},
	{"torn-tail", vfs.CrashOptions{TornTail: true}},
	{"zero-fill", vfs.CrashOptions{TornTail: true, ZeroFillTail: true}},
	{"sectors-512", vfs.CrashOptions{SectorSize: 512}},
	{"sectors-4096", vfs.CrashOptions{SectorSize: 4096}},
}

// plLossModels are the crash models under which a negative control must
// lose what a skipped fsync left unsynced.
var plLossModels = []string{"synced-only", "torn-tail", "sectors-512"}

// Violation prefixes the negative controls expect.
const (
	plFinLost   = "acked finished ranges lost"
	plCorrupted = "a power loss was reported as corruption"
)

// subtractRanges returns the offsets of a (ascending, disjoint) that b
// (ascending, disjoint) does not hold.
func subtractRanges(a, b []contract.OffsetRange) []contract.OffsetRange {
	var out []contract.OffsetRange
	j := 0
	for _, r := range a {
		lo := r.Lo
		for j < len(b) && b[j].Hi <= lo {
			j++
		}
		for k := j; k < len(b) && b[k].Lo < r.Hi && lo < r.Hi; k++ {
			if b[k].Lo > lo {
				out = append(out, contract.OffsetRange{Lo: lo, Hi: b[k].Lo})
			}
			lo = max(lo, b[k].Hi)
		}
		if lo < r.Hi {
			out = append(out, contract.OffsetRange{Lo: lo, Hi: r.Hi})
		}
	}
	return out
}

// inRanges reports whether off lies in one of rs (ascending, disjoint).
func inRanges(rs []contract.OffsetRange, off int64) bool {
	for _, r := range rs {
		if off < r.Lo {
			return false
		}
		if off < r.Hi {
			return true
		}
	}
	return false
}

// plResult is what every checkpoint power-loss round counts; each round's
// result embeds it.
type plResult struct {
	cut        int      // reopens that cut a torn last append
	rewrites   int      // .finished rewrites (compactions, backward Commits) before the power loss
	violations []string // every violation
}

func (r *plResult) fail(format string, a ...any) {
	r.violations = append(r.violations, fmt.Sprintf(format, a...))
}

// plSpans are a round's random ranges, drawn from its rng in this order:
// the compaction threshold (64 bytes plus up to compact), the Commit step
// (commitBig, or commitSmall in half the rounds: the file outlives many
// Commits), and the filesystem operation the power is lost at (up to
// crash, or in most rounds the fsync up to crashOnSync).
type plSpans struct {
	compact                int
	commitBig, commitSmall int
	crash, crashOnSync     int
}

// plRound is one power-loss round on checkpoint "d" over a MemFS.
type plRound struct {
	res        *plResult
	rng        *rand.Rand
	copts      vfs.CrashOptions
	fsys       *vfs.MemFS
	snap       *vfs.MemFS // what the power loss left, once it happened
	c          *Checkpoint
	commitStep int   // how far a Commit may move
	offset     int64 // the last completed Commit's
	flightOff  int64 // a Commit in flight at the power loss, else -1
	clearing   bool  // a ClearFinished in flight at the power loss
}

// startPowerLossRound opens checkpoint "d" (with hooks) over a new MemFS
// under the crash model of seed, with an rng seeded by seed and salt, and
// arms the power loss at a random filesystem operation (under the sector
// model and the torn tail, most rounds lose power right before a random
// fsync: an append is then written and unsynced). Nil if the open failed
// (a violation in res).
func startPowerLossRound(seed, salt uint64, hooks *Hooks, spans plSpans, res *plResult) *plRound {
	p := &plRound{res: res, flightOff: -1}
	p.rng = rand.New(rand.NewPCG(seed, salt))
	p.copts = finCrashModels[int(seed)%len(finCrashModels)].opts
	p.copts.Rand = rand.New(rand.NewPCG(seed, 1))

	p.fsys = vfs.NewMem()
	if err := p.fsys.MkdirAll(finTopic); err != nil {
		panic(err)
	}
	if err := p.fsys.SyncDir("/"); err != nil {
		panic(err)
	}
	c, err := OpenCheckpoint(p.fsys, finTopic, "d", 1<<40, zap.NewNop())
	if err != nil {
		res.fail("open: %v", err)
		return nil
	}
	p.c = c
	c.hooks = hooks
	c.compactBytes = int64(64 + p.rng.IntN(spans.compact)) // compactions happen
	p.commitStep = spans.commitBig
	if p.rng.IntN(2) == 0 {
		p.commitStep = spans.commitSmall
	}
	onSync := p.rng.IntN(4) != 0
	crashAt := int64(1 + p.rng.IntN(spans.crash))
	if onSync {
		crashAt = int64(1 + p.rng.IntN(spans.crashOnSync))
	}
	var ops int64
	p.fsys.SetHook(func(op vfs.Op, name string) error {
		if p.snap != nil {
			return nil
		}
		if op == vfs.OpRename && strings.HasSuffix(name, FinishedExt+vfs.TmpExt) {
			res.rewrites++
		}
		if onSync && op != vfs.OpSync {
			return nil
		}
		if ops++; ops == crashAt {
			p.snap = p.fsys.Crash(p.copts)
		}
		return nil
	})
	return p
}

// crashed reports whether the power is lost: the call just made was in
// flight at the power loss, and may or may not be there after it.
func (p *plRound) crashed() bool { return p.snap != nil }

// commit commits next: ok when the Commit completed (the offset is next;
// the caller drops what it dropped), stop when it failed (a violation: the
// round ends). A Commit in flight at the power loss is neither.
func (p *plRound) commit(next int64, what string) (ok, stop bool) {
	err := p.c.Commit(next)
	if p.snap != nil {
		p.flightOff = next
		return false, false
	}
	if err != nil {
		p.res.fail("%s: %v", what, err)
		return false, true
	}
	p.offset = next
	return true, false
}

// commitForward commits a random offset up to commitStep past the
// offset, as commit.
func (p *plRound) commitForward() (ok, stop bool) {
	return p.commit(p.offset+int64(p.rng.IntN(p.commitStep)), "Commit")
}

// clearAndSeek calls ClearFinished and, once it completed, reset (the
// caller forgets what it owes), then now and then a Commit back (a seek).
// stop when a call failed (a violation: the round ends).
func (p *plRound) clearAndSeek(reset func()) (stop bool) {
	err := p.c.ClearFinished()
	if p.snap != nil {
		p.clearing = true
		return false
	}
	if err != nil {
		p.res.fail("ClearFinished: %v", err)
		return true
	}
	reset()
	if p.rng.IntN(2) == 0 && p.offset > 0 {
		_, stop := p.commit(int64(p.rng.IntN(int(p.offset))), "Commit back")
		return stop
	}
	return false
}

// reopen loses power now if the random point was never reached, reopens
// what the crash left and checks that the offset is the last completed
// Commit's or the one in flight, and that the reopen reports no
// corruption (a power loss is crash damage; a cut is counted). Nil if the
// reopen failed (a violation).
func (p *plRound) reopen() *Checkpoint {
	if p.snap == nil {
		p.snap = p.fsys.Crash(p.copts) // the random point was never reached
	}
	p.fsys.SetHook(nil)

	c2, err := OpenCheckpoint(p.snap, finTopic, "d", 1<<40, zap.NewNop())
	if err != nil {
		p.res.fail("reopen after power loss: %v", err)
		return nil
	}
	if reo := c2.Offset(); reo != p.offset && reo != p.flightOff {
		p.res.fail("offset after power loss %d, want %d (or %d in flight)", reo, p.offset, p.flightOff)
	}
	if r := c2.FinishedRecovery(); r.CorruptAt >= 0 {
		p.res.fail("%s: %+v", plCorrupted, r)
	} else if r.CutBytes > 0 {
		p.res.cut++
	}
	return c2
}

// checkFinished checks the finished ranges got after the reopen at
// offset reo: none that allowed does not hold (what names them in the
// violation), and unless a ClearFinished was in flight, every one of must
// at or past reo. lost when some of must were lost.
func (p *plRound) checkFinished(got, allowed, must []contract.OffsetRange, reo int64, what string) (lost bool) {
	if extra := subtractRanges(got, allowed); len(extra) > 0 {
		p.res.fail("%s after power loss but never given (or dropped): %v (allowed %v)", what, extra, allowed)
	}
	if !p.clearing {
		if lost := subtractRanges(trimRanges(must, reo), got); len(lost) > 0 {
			p.res.fail("%s by the power loss: %v (have %v)", plFinLost, lost, got)
			return true
		}
	}
	return false
}

// forPowerLossSeeds calls round for up to rounds seeds from base (r
// counting from 0), with the name of the seed's crash model, until round
// returns false, and returns how many rounds ran.
func forPowerLossSeeds(base uint64, rounds int, round func(r int, seed uint64, model string) bool) int {
	n := 0
	for r := 0; r < rounds; r++ {
		seed := base + uint64(r)
		n++
		if !round(r, seed, finCrashModels[int(seed)%len(finCrashModels)].name) {
			break
		}
	}
	return n
}

// reportViolations fails t with every violation of seed's round.
func reportViolations(t *testing.T, seed uint64, model string, violations []string) {
	t.Helper()
	for _, v := range violations {
		t.Errorf("seed %d (%s): %s", seed, model, v)
	}
}

// reportUnexpected fails t with every violation of seed's round that
// starts with none of expected.
func reportUnexpected(t *testing.T, seed uint64, model string, violations []string, expected ...string) {
	t.Helper()
	for _, v := range violations {
		ok := false
		for _, e := range expected {
			ok = ok || strings.HasPrefix(v, e)
		}
		if !ok {
			t.Errorf("seed %d (%s): unexpected violation: %s", seed, model, v)
		}
	}
}

// wantLostUnder fails t unless the negative control lost something
// under every model of plLossModels with the fsync of what skipped.
func wantLostUnder(t *testing.T, lostBy map[string]int, what string) {
	t.Helper()
	for _, m := range plLossModels {
		if lostBy[m] == 0 {
			t.Errorf("negative control: skipping the fsync of %s lost nothing under %s; the power-loss test cannot detect it", what, m)
		}
	}
}
