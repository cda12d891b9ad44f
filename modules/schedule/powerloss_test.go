package schedule

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// crashModels are the power-loss models the rounds cycle through: the
// tail models and the sector model of vfs.MemFS.
var crashModels = []struct {
	name string
	opts vfs.CrashOptions
}{
	{"synced-only", vfs.CrashOptions{}},
	{"torn-tail", vfs.CrashOptions{TornTail: true}},
	{"zero-fill", vfs.CrashOptions{TornTail: true, ZeroFillTail: true}},
	{"sectors-512", vfs.CrashOptions{SectorSize: 512}},
	{"sectors-4096", vfs.CrashOptions{SectorSize: 4096}},
}

var errPowerLost = errors.New("power lost")

// plResult is what one power-loss round saw.
type plResult struct {
	acked, cancelled, delivered, duplicates int
	violations                              []string
}

// powerLossRound runs random Schedule, Cancel and MoveDue calls (the clock
// moving forward) over a MemFS, loses power at a random filesystem
// operation, reopens what the crash left and moves everything. The topic
// (the Target) is durable once Append returns. The property:
//
//   - every Schedule that returned nil is delivered, before or after the
//     power loss, unless a Cancel of it returned true, or failed (its
//     outcome is then unknown) (lost: a violation);
//   - a message whose Cancel returned true is never delivered afterwards;
//   - no message is appended before its due time, before or after;
//   - nothing is delivered that no Schedule was given;
//   - the reopen never fails.
//
// Moved twice (a power loss between the topic append and the delivered
// record's fsync) is counted; TestPowerLoss requires 0.
func powerLossRound(seed uint64, model vfs.CrashOptions, mod func(*Options)) plResult {
	// Half the rounds append each topic's run of a step at once.
	if seed%2 == 1 {
		return powerLossRoundOver(seed, model, mod, func(t *recTarget) Target { return batchTarget{t} })
	}
	return powerLossRoundOver(seed, model, mod, func(t *recTarget) Target { return t })
}

func powerLossRoundPlain(seed uint64) plResult {
	return powerLossRoundOver(seed, crashModels[0].opts, nil, func(t *recTarget) Target { return plainTarget{t} })
}

// powerLossRoundOver is powerLossRound over the Target wrap makes of the
// recording one.
func powerLossRoundOver(seed uint64, model vfs.CrashOptions, mod func(*Options), wrap func(*recTarget) Target) plResult {
	var res plResult
	rng := rand.New(rand.NewPCG(seed, 0x736368))
	model.Rand = rand.New(rand.NewPCG(seed, 7))
	clk := &fakeClock{t: base()}
	fs := vfs.NewMem()
	opts := Options{FS: fs, Dir: "data/.scheduled", BucketWidth: time.Duration(200+rng.IntN(2000)) * time.Millisecond,
		MoveBatch: 1 + rng.IntN(6), Now: clk.Now}
	if mod != nil {
		mod(&opts)
	}
	due := map[string]int64{}      // stored → due (Unix ms), acked or not
	acked := map[string]string{}   // stored → schedule id, Schedule returned nil
	cancelled := map[string]bool{} // Cancel returned true
	early := func(got []delivery) {
		for _, d := range got {
			at, ok := due[d.stored]
			switch {
			case !ok:
				res.violations = append(res.violations, fmt.Sprintf("delivered %s, never scheduled", d.stored))
			case d.at.UnixMilli() < at:
				res.violations = append(res.violations, fmt.Sprintf("early: %s appended at %d, due %d", d.stored, d.at.UnixMilli(), at))
			}
		}
	}
	// The topic outlives the power loss: it is durable once Append
	// returns, and the restarted scheduler looks in it.
	tgt := &recTarget{now: clk.Now}
	s := New(opts, wrap(tgt))
	if err := s.Open(); err != nil {
		res.violations = append(res.violations, "first open: "+err.Error())
		return res
	}
	// The flusher and the mover's next step may reach the filesystem at
	// once: the count is atomic (the crash point then depends a little on
	// their interleaving; the property holds for any).
	var ops atomic.Int64
	crashAt := int64(1 + rng.IntN(400))
	fs.SetHook(func(vfs.Op, string) error {
		if ops.Add(1) >= crashAt {
			return errPowerLost
		}
		return nil
	})
	ctx := context.Background()
	cancelledAt := map[string]int{} // stored → len(all deliveries) when its cancel returned
	maybeCancelled := map[string]bool{}
	for i := 0; i < 200 && ops.Load() < crashAt; i++ {
		switch k := rng.IntN(10); {
		case k < 6:
			m := string(msg(i))
			at := clk.Now().Add(time.Duration(1+rng.IntN(4000)) * time.Millisecond)
			due[m] = at.UnixMilli()
			if id, err := s.Schedule(ctx, "t", []byte(m), at); err == nil {
				acked[m] = id
			}
		case k < 7 && len(acked) > 0:
			for m, id := range acked { // a random one
				ok, err := s.Cancel("t", id)
				switch {
				case ok && err == nil:
					cancelled[m] = true
					cancelledAt[m] = len(tgt.deliveries())
				case err != nil:
					// Outcome unknown: the cancelled record may have
					// reached the disk before the fsync failed.
					maybeCancelled[m] = true
				}
				break
			}
		default:
			clk.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			s.MoveDue(ctx)
		}
	}
	fs.SetHook(nil)
	s.Stop(ctx)
	all := tgt.deliveries()
	for m, n := range cancelledAt {
		for _, d := range all[n:] {
			if d.stored == m {
				res.violations = append(res.violations, fmt.Sprintf("cancelled %s delivered after its cancel", m))
			}
		}
	}
	before := len(all)

	// Power loss, restart, first at the same clock (nothing early), then
	// far ahead (everything due).
	crashed := fs.Crash(model)
	opts.FS = crashed
	s2 := New(opts, wrap(tgt))
	if err := s2.Open(); err != nil {
		res.violations = append(res.violations, "reopen: "+err.Error())
		return res
	}
	defer s2.Stop(ctx)
	if _, _, err := s2.MoveDue(ctx); err != nil {
		res.violations = append(res.violations, "move after reopen: "+err.Error())
	}
	clk.Add(time.Hour)
	if _, _, err := s2.MoveDue(ctx); err != nil {
		res.violations = append(res.violations, "move after reopen: "+err.Error())
	}
	if p := s2.PendingTotal(); p != 0 {
		res.violations = append(res.violations, fmt.Sprintf("%d still pending after everything was due", p))
	}
	all = tgt.deliveries()
	early(all)
	count := map[string]int{}
	for _, d := range all {
		count[d.stored]++
	}
	for _, d := range all[before:] {
		if cancelled[d.stored] {
			res.violations = append(res.violations, fmt.Sprintf("lost cancel: %s delivered after the restart", d.stored))
		}
	}
	for m := range acked {
		if !cancelled[m] && !maybeCancelled[m] && count[m] == 0 {
			res.violations = append(res.violations, fmt.Sprintf("lost: acked %s never delivered", m))
		}
	}
	for _, c := range count {
		if c > 1 {
			res.duplicates++
		}
	}
	res.acked, res.cancelled, res.delivered = len(acked), len(cancelled), len(count)
	return res
}

func rounds(t *testing.T) int {
	if testing.Short() {
		return 60
	}
	return 400
}

// TestPowerLoss: every acknowledged scheduled message is delivered after
// a power loss, none early, no acknowledged cancel undone, under every
// crash model.
func TestPowerLoss(t *testing.T) {
	for _, m := range crashModels {
		t.Run(m.name, func(t *testing.T) {
			var tot plResult
			for seed := range uint64(rounds(t)) {
				r := powerLossRound(seed, m.opts, nil)
				for _, v := range r.violations {
					t.Errorf("seed %d: %s", seed, v)
				}
				tot.acked += r.acked
				tot.cancelled += r.cancelled
				tot.delivered += r.delivered
				tot.duplicates += r.duplicates
			}
			if tot.acked == 0 || tot.delivered == 0 || tot.cancelled == 0 {
				t.Fatalf("rounds exercised nothing: %+v", tot)
			}
			if tot.duplicates != 0 {
				t.Errorf("%d messages moved twice: the move is not exactly once", tot.duplicates)
			}
			t.Logf("%s: %d rounds, %d acked schedules, %d acked cancels, %d delivered, %d moved twice",
				m.name, rounds(t), tot.acked, tot.cancelled, tot.delivered, tot.duplicates)
		})
	}
}

// TestPowerLossNegativeControl: with the fsyncs skipped, the same rounds
// lose acknowledged schedules, so the property above can fail.
func TestPowerLossNegativeControl(t *testing.T) {
	for _, m := range crashModels[:4] {
		t.Run(m.name, func(t *testing.T) {
			lost := 0
			for seed := range uint64(rounds(t)) {
				for _, v := range powerLossRound(seed, m.opts, func(o *Options) { o.skipSync = true }).violations {
					if len(v) > 5 && v[:5] == "lost:" {
						lost++
					}
				}
			}
			if lost == 0 {
				t.Fatalf("%s: no acknowledged schedule lost without fsync: the power-loss test cannot fail", m.name)
			}
			t.Logf("%s: without fsync, %d acknowledged schedules lost over %d rounds", m.name, lost, rounds(t))
		})
	}
}

// TestPowerLossIntentNegativeControl: with the moving records written but
// not fsynced before the appends, the same rounds move messages twice, so
// the "0 moved twice" of TestPowerLoss can fail.
func TestPowerLossIntentNegativeControl(t *testing.T) {
	m := crashModels[0]
	twice := 0
	for seed := range uint64(rounds(t)) {
		r := powerLossRound(seed, m.opts, func(o *Options) { o.skipIntentSync = true })
		twice += r.duplicates
	}
	if twice == 0 {
		t.Fatalf("%s: nothing moved twice without the moving records' fsync: the exactly-once check cannot fail", m.name)
	}
	t.Logf("%s: without the moving records' fsync, %d messages moved twice over %d rounds", m.name, twice, rounds(t))
}

// TestPowerLossPlainTarget: over a Target that is not a Ledger the move is
// at least once: the same rounds move some messages twice (what the
// moving records prevent), and lose none.
func TestPowerLossPlainTarget(t *testing.T) {
	twice := 0
	for seed := range uint64(rounds(t)) {
		r := powerLossRoundPlain(seed)
		for _, v := range r.violations {
			t.Errorf("seed %d: %s", seed, v)
		}
		twice += r.duplicates
	}
	if twice == 0 {
		t.Fatal("nothing moved twice over a plain target: the rounds do not reach the window between append and record")
	}
	t.Logf("plain target: %d messages moved twice over %d rounds (at least once)", twice, rounds(t))
}
