package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Power-loss property test (simulated power loss).
//
// Random concurrent appenders at random ack levels (and random AppendBatch)
// write to a Log on a MemFS; at a random filesystem operation the hook takes
// a crash snapshot (MemFS.Crash: everything not fsynced is dropped, or kept
// torn / zero-filled per variant). Reopening the snapshot must succeed and:
//   - every DURABLE-acknowledged entry is readable, byte-identical, at its offset;
//   - offsets are contiguous from 0 (ReadBatch from 0 to hw, no gap, no corruption);
//   - the recovered log is a prefix of what the log held before the crash,
//     so nothing that was never written appears.
// WRITTEN and ACCEPTED entries may be lost; the counts are logged.

type crashVariant struct {
	name string
	opts vfs.CrashOptions
	// sync and interval are the log's index-sync mode and interval.
	sync     IndexSync
	interval time.Duration
	// prealloc: the log preallocates (Options.Preallocate, 4 KiB to
	// 256 KiB drawn per round), so group commits overwrite synced zeros
	// and use fdatasync.
	prealloc bool
}

var crashVariants = []crashVariant{
	{name: "drop-unsynced", opts: vfs.CrashOptions{}},
	{name: "torn-tail", opts: vfs.CrashOptions{TornTail: true}},
	{name: "zero-fill-tail", opts: vfs.CrashOptions{ZeroFillTail: true}},
	{name: "torn-zero-fill-tail", opts: vfs.CrashOptions{TornTail: true, ZeroFillTail: true}},
	// As disks fail: every 512-byte sector (4 KiB page) written since a
	// file's last fsync independently keeps its new or its old content,
	// the size independent of the data: holes followed by data.
	{name: "sectors-512", opts: vfs.CrashOptions{SectorSize: 512}},
	{name: "pages-4096", opts: vfs.CrashOptions{SectorSize: 4096}},
}

// lazyIntervals are the index-sync intervals the lazy rounds cycle
// through: an index fsynced almost after every group commit, now and then,
// and never before a rotation or close.
var lazyIntervals = []time.Duration{time.Millisecond, 50 * time.Millisecond, time.Hour}

// lazyVariants are crashVariants with index-sync lazy, each crash option
// with each interval.
func lazyVariants() []crashVariant {
	var out []crashVariant
	for _, v := range crashVariants {
		for _, d := range lazyIntervals {
			out = append(out, crashVariant{name: fmt.Sprintf("lazy-%s-%s", d, v.name), opts: v.opts, sync: IndexSyncLazy, interval: d})
		}
	}
	return out
}

type crashCounts struct {
	rounds                                    int
	ackedDurable, ackedWritten, ackedAccepted int
	lostDurable, lostWritten, lostAccepted    int
	recoveredEntries, cutEntries, truncBytes  int64
	reindexed                                 int64 // entries repair indexed again
	cutValid                                  int64 // CRC-valid entries cut with a torn group commit
	refused                                   int   // reopens after the power loss that refused the topic
	bigGroups                                 int   // rounds with batches larger than one group commit
	deleted                                   int   // acked entries below the recovered start offset (retention)
	startAfterCrash                           int64
	datasyncs                                 int64 // group-commit fdatasyncs (preallocation)
	zeroTail                                  int64 // zero bytes recovery cut from the tails
}

func (c *crashCounts) add(o crashCounts) {
	c.rounds += o.rounds
	c.ackedDurable += o.ackedDurable
	c.ackedWritten += o.ackedWritten
	c.ackedAccepted += o.ackedAccepted
	c.lostDurable += o.lostDurable
	c.lostWritten += o.lostWritten
	c.lostAccepted += o.lostAccepted
	c.recoveredEntries += o.recoveredEntries
	c.cutEntries += o.cutEntries
	c.truncBytes += o.truncBytes
	c.reindexed += o.reindexed
	c.cutValid += o.cutValid
	c.refused += o.refused
	c.bigGroups += o.bigGroups
	c.deleted += o.deleted
	c.startAfterCrash += o.startAfterCrash
	c.datasyncs += o.datasyncs
	c.zeroTail += o.zeroTail
}

type ackRec struct {
	level contract.AckLevel
	first int64 // -1 for ACCEPTED
	batch [][]byte
}

// crashRound runs one round and returns the counts and the violations of
// the invariants other than "DURABLE never lost" (which is counted in
// lostDurable and judged by the caller, so the negative control can reuse
// the round).
//
// With retain set, a retention pass (ApplyRetention by size, a limit of a
// few segments) runs in a loop while the writers append, so the power loss
// may also strike in the middle of a head deletion: then offsets below the
// recovered log's start offset are deleted (not lost), and everything
// acknowledged at or after it must be there.
// preallocVariants are variants with preallocation on.
func preallocVariants(vs []crashVariant) []crashVariant {
	var out []crashVariant
	for _, v := range vs {
		v.name, v.prealloc = "prealloc-"+v.name, true
		out = append(out, v)
	}
	return out
}

func crashRound(seed uint64, v crashVariant, ackBeforeSync, retain bool) (c crashCounts, violations []string) {
	return crashRoundHooks(seed, v, &Hooks{AckBeforeSync: ackBeforeSync}, retain)
}

// crashRoundHooks is crashRound with the log's hooks given (a negative
// control's deliberate bug).
func crashRoundHooks(seed uint64, v crashVariant, hooks *Hooks, retain bool) (c crashCounts, violations []string) {
	c.rounds = 1
	rng := rand.New(rand.NewPCG(seed, 0x6d6d6d71))
	fsys := vfs.NewMem()
	opts := Options{
		FS:                fsys,
		Logger:            zap.NewNop(),
		SegmentMaxBytes:   int64(256 + rng.IntN(4096)),
		Hooks:             hooks,
		IndexSync:         v.sync,
		IndexSyncInterval: v.interval,
	}
	if v.prealloc {
		// Its own generator: the other variants' rounds stay as they were.
		opts.Preallocate = int64(1+rand.New(rand.NewPCG(seed, 7)).IntN(64)) * 4096
	}
	// One round in eight has large segments and now and then a batch
	// larger than MaxGroupBytes, which the writer splits into several
	// fsynced group commits: a crash between them, or inside one of them.
	big := rng.IntN(8) == 0
	if big {
		opts.SegmentMaxBytes = 4 * MaxGroupBytes
		c.bigGroups = 1
	}
	l, err := Open(testDir, opts)
	if err != nil {
		return c, []string{"open: " + err.Error()}
	}
	writers := 2 + rng.IntN(7)
	perWriter := 10 + rng.IntN(50)
	crashAt := int64(1 + rng.IntN(writers*perWriter*2))
	copts := v.opts
	copts.Rand = rand.New(rand.NewPCG(seed, 1))

	var (
		ops      atomic.Int64
		crashing atomic.Bool
		snapMu   sync.Mutex
		snap     *vfs.MemFS
	)
	takeSnap := func() {
		snapMu.Lock()
		defer snapMu.Unlock()
		if snap == nil {
			crashing.Store(true) // before the snapshot: acks seen after this are not counted
			snap = fsys.Crash(copts)
		}
	}
	// Under the sector model three rounds in four lose power right before
	// a random fsync (of a segment or an index): a whole group commit is
	// then written and unsynced, the shape where sectors persisted out of
	// order leave holes followed by data.
	onSync := v.opts.SectorSize > 0 && rng.IntN(4) != 0
	if onSync {
		crashAt = int64(1 + rng.IntN(writers*perWriter/2+1))
	}
	fsys.SetHook(func(op vfs.Op, name string) error {
		isSync := op == vfs.OpSync || op == vfs.OpDatasync
		if onSync && !isSync {
			return nil
		}
		if ops.Add(1) == crashAt {
			if isSync {
				// Let appenders answered just before this fsync record their
				// acks (matters for the AckBeforeSync negative control).
				time.Sleep(time.Millisecond)
			}
			takeSnap()
		}
		return nil
	})

	var mu sync.Mutex
	var acks []ackRec
	submitted := map[string]bool{}
	var wg sync.WaitGroup
	stopRetention := make(chan struct{})
	retentionDone := make(chan struct{})
	go func() {
		defer close(retentionDone)
		if !retain {
			return
		}
		p := contract.RetentionPolicy{MaxBytes: 3 * opts.SegmentMaxBytes}
		for {
			select {
			case <-stopRetention:
				return
			default:
			}
			if _, err := l.ApplyRetention(p, time.Now(), contract.KeepAll); err != nil {
				mu.Lock()
				violations = append(violations, "retention: "+err.Error())
				mu.Unlock()
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	for w := 0; w < writers; w++ {
		wrng := rand.New(rand.NewPCG(seed, uint64(w)+100))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				n, pad := 1, 300
				if wrng.IntN(5) == 0 {
					n = 1 + wrng.IntN(5)
				}
				if big && wrng.IntN(10) == 0 {
					n, pad = 4+wrng.IntN(4), 200_000+wrng.IntN(200_000)
				}
				batch := make([][]byte, n)
				for j := range batch {
					batch[j] = []byte(fmt.Sprintf(`{"s":%d,"w":%d,"i":%d,"j":%d,"p":"%s"}`,
						seed, w, i, j, strings.Repeat("z", wrng.IntN(pad))))
				}
				level := contract.AckLevel(1 + wrng.IntN(3))
				mu.Lock()
				for _, p := range batch {
					submitted[string(p)] = true
				}
				mu.Unlock()
				var first int64
				var err error
				if n == 1 && wrng.IntN(2) == 0 {
					first, err = l.Append(context.Background(), batch[0], level)
				} else {
					first, err = l.AppendBatch(context.Background(), batch, level)
				}
				if err != nil {
					mu.Lock()
					violations = append(violations, "append: "+err.Error())
					mu.Unlock()
					return
				}
				if crashing.Load() {
					continue // answered after the power loss: not counted
				}
				mu.Lock()
				acks = append(acks, ackRec{level: level, first: first, batch: batch})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stopRetention)
	<-retentionDone
	takeSnap() // crash at the end if the random point was never reached
	fsys.SetHook(nil)
	c.datasyncs = l.Stats().Datasyncs
	if err := l.Close(); err != nil {
		violations = append(violations, "close: "+err.Error())
	}
	// What the log held before the crash (the un-crashed FS, reopened).
	truthLog, err := Open(testDir, Options{FS: fsys, Logger: zap.NewNop(), SegmentMaxBytes: opts.SegmentMaxBytes})
	if err != nil {
		return c, append(violations, "reopen uncrashed: "+err.Error())
	}
	truth, terr := readAllErr(truthLog)
	truthStart := truthLog.StartOffset()
	truthLog.Close()
	if terr != nil {
		return c, append(violations, "read uncrashed: "+terr.Error())
	}
	seen := map[string]bool{}
	for _, e := range truth {
		if !submitted[string(e.Payload)] || seen[string(e.Payload)] {
			violations = append(violations, fmt.Sprintf("uncrashed log offset %d holds an unknown or duplicate entry", e.Offset))
		}
		seen[string(e.Payload)] = true
	}

	// The restart may switch index-sync modes: recovery must not depend
	// on the mode that wrote the topic.
	reopenMode := IndexSync(rng.IntN(2))
	rl, err := Open(testDir, Options{FS: snap, Logger: zap.NewNop(), SegmentMaxBytes: opts.SegmentMaxBytes, IndexSync: reopenMode})
	if err != nil {
		var ce *contract.CorruptionError
		if errors.As(err, &ce) {
			c.refused++
		}
		return c, append(violations, fmt.Sprintf("reopen after power loss (written %s, reopened %s): %v", v.sync, reopenMode, err))
	}
	defer rl.Close()
	rep := rl.Repair()
	c.cutEntries, c.truncBytes, c.reindexed, c.cutValid = rep.CutEntries, rep.TruncatedBytes, rep.ReindexedEntries, rep.CutValidEntries
	c.zeroTail = rep.ZeroTailBytes
	got, err := readAllErr(rl)
	if err != nil {
		return c, append(violations, "read after power loss: "+err.Error())
	}
	c.recoveredEntries = int64(len(got))
	start, hw := rl.StartOffset(), rl.HighWatermark()
	c.startAfterCrash = start
	if int64(len(got)) != hw-start {
		violations = append(violations, fmt.Sprintf("read %d entries between start offset %d and hw %d", len(got), start, hw))
	}
	if !retain && start != 0 {
		violations = append(violations, fmt.Sprintf("start offset %d without retention", start))
	}
	if start > truthStart {
		violations = append(violations, fmt.Sprintf("recovered start offset %d is past the one retention reached, %d", start, truthStart))
	}
	truthHW := truthStart + int64(len(truth))
	if hw > truthHW {
		violations = append(violations, fmt.Sprintf("recovered up to offset %d, only %d were ever written", hw, truthHW))
	}
	present := map[string]bool{}
	for _, e := range got {
		if i := e.Offset - truthStart; i >= 0 && i < int64(len(truth)) && !bytes.Equal(e.Payload, truth[i].Payload) {
			violations = append(violations, fmt.Sprintf("offset %d: recovered %.40q, written %.40q", e.Offset, e.Payload, truth[i].Payload))
		}
		if !submitted[string(e.Payload)] {
			violations = append(violations, fmt.Sprintf("offset %d: recovered an entry never written", e.Offset))
		}
		present[string(e.Payload)] = true
	}
	for _, a := range acks {
		switch a.level {
		case contract.Durable:
			c.ackedDurable += len(a.batch)
		case contract.Written:
			c.ackedWritten += len(a.batch)
		case contract.Accepted:
			c.ackedAccepted += len(a.batch)
		}
		for j, p := range a.batch {
			if a.level == contract.Accepted {
				if !present[string(p)] {
					c.lostAccepted++
				}
				continue
			}
			off := a.first + int64(j)
			if off < start {
				c.deleted++ // retention deleted it: expired, not lost
				continue
			}
			if off >= hw {
				if a.level == contract.Durable {
					c.lostDurable++
				} else {
					c.lostWritten++
				}
				continue
			}
			if g := got[off-start]; !bytes.Equal(g.Payload, p) {
				violations = append(violations, fmt.Sprintf("%s ack for offset %d: recovered %.40q, acked %.40q", a.level, off, g.Payload, p))
			}
		}
	}
	return c, violations
}

// readAllErr reads every entry from the log start offset to the high
// watermark.
func readAllErr(l *Log) ([]Entry, error) {
	hw := l.HighWatermark()
	var out []Entry
	for off := l.StartOffset(); off < hw; {
		es, err := l.ReadBatch(off, 256)
		if err != nil {
			return out, fmt.Errorf("ReadBatch(%d): %w", off, err)
		}
		if len(es) == 0 {
			return out, fmt.Errorf("ReadBatch(%d): nothing below hw %d (gap)", off, hw)
		}
		for _, e := range es {
			if e.Offset != off {
				return out, fmt.Errorf("ReadBatch: offset %d, want %d (gap)", e.Offset, off)
			}
			out = append(out, Entry{Offset: e.Offset, Payload: bytes.Clone(e.Payload)})
			off++
		}
	}
	return out, nil
}

// crashRounds is the number of power-loss rounds per crash variant: 1000
// in the long runs (make crash), 50 in make test's run without the race
// detector, and a few under it. The race detector slows these MemFS
// rounds some 24 times (the storage package took 1,249 s with -race
// against 53 s without, on this project's 2-core CI machine); a few
// rounds per variant still run every writer, reader and repair path
// under it, and make test runs the package again without it for the
// full count.
func crashRounds() int {
	switch {
	case isLong():
		return 1000
	case raceEnabled:
		return 6
	}
	return 50
}

// controlMaxRounds bounds a negative control's rounds: it runs at least
// 2×crashRounds() rounds, then on until its deliberate bug is caught under
// every fault model, up to this many. The bound does not shrink under the
// race detector: a control must catch its bug, however many rounds that
// takes.
func controlMaxRounds() int {
	return 10 * max(crashRounds(), 50)
}

func TestPowerLossProperty(t *testing.T) {
	testPowerLossProperty(t, crashVariants)
}

// TestPowerLossPropertyLazy is the same property with index-sync lazy: one
// fsync per group commit, the index fsynced later. Every crash variant
// runs with every interval of lazyIntervals (fewer rounds each, the same
// total order of magnitude).
func TestPowerLossPropertyLazy(t *testing.T) {
	testPowerLossProperty(t, lazyVariants())
}

// TestPowerLossPropertyPrealloc is the same property with preallocation
// on, in both index-sync modes: the group commits overwrite fsynced zeros
// inside the synced size and use fdatasync; the sector model keeps any
// subset of those overwritten sectors; the preallocating goroutine's own
// writes and fsyncs are crash points too.
func TestPowerLossPropertyPrealloc(t *testing.T) {
	testPowerLossProperty(t, preallocVariants(append(append([]crashVariant(nil), crashVariants...), lazyVariants()...)))
}

// TestPowerLossNegativeControlPrealloc: with preallocation on and the
// fdatasync of group commits deliberately skipped (Hooks.SkipDatasync),
// the property must fail: DURABLE acknowledgements are lost, under the
// sector model on its own too. It proves the rounds above depend on that
// fdatasync.
func TestPowerLossNegativeControlPrealloc(t *testing.T) {
	variants := preallocVariants(crashVariants)
	var total crashCounts
	damaged := 0
	byModel := map[string]*crashCounts{}
	lostIn := func(m string) bool { return byModel[m] != nil && byModel[m].lostDurable > 0 }
	for r := 0; r < controlMaxRounds() && (r < 2*crashRounds() || !lostIn("prefix") || !lostIn("sectors")); r++ {
		seed := uint64(950000 + r)
		v := variants[r%len(variants)]
		// The deliberate bug leaves unsynced bytes in sealed segments
		// too: reads and reopens may then meet corruption. Counted, not
		// failed on; what must happen is a lost acknowledgement.
		c, violations := crashRoundHooks(seed, v, &Hooks{SkipDatasync: true}, false)
		damaged += len(violations)
		total.add(c)
		m := faultModel(v)
		if byModel[m] == nil {
			byModel[m] = &crashCounts{}
		}
		byModel[m].add(c)
	}
	t.Logf("SkipDatasync: %d rounds; acked durable %d, lost durable %d, topics refused %d, violations (damaged data) %d", total.rounds, total.ackedDurable, total.lostDurable, total.refused, damaged)
	for _, m := range []string{"prefix", "sectors"} {
		c := byModel[m]
		if c == nil || c.lostDurable == 0 {
			t.Errorf("negative control: skipping fdatasync lost nothing under the %s fault model; the power-loss test cannot detect the bug", m)
		}
	}
}

// TestPowerLossNegativeControlIndexFirst: with the index of each
// commit-mode group commit written and fsynced before the segment's fsync
// (Hooks.IndexBeforeSegmentSync, one order in which fsyncing both files at
// once can complete), the property must fail under both fault models, with
// and without preallocation: a power loss then leaves index entries on
// disk whose segment bytes are not, which repair refuses as damage to
// fsynced data (or, were it to accept them, DURABLE entries would be
// lost). It proves the rounds above cover an index made durable ahead of
// its segment in the last group commit, and that repair relies on the
// order the writer keeps.
func TestPowerLossNegativeControlIndexFirst(t *testing.T) {
	variants := append(append([]crashVariant(nil), crashVariants...), preallocVariants(crashVariants)...)
	byModel := map[string]*crashCounts{}
	failed := map[string]int{} // rounds refused or losing a DURABLE ack, per fault model
	caught := func(m string) bool { return failed[m] > 0 && failed["prealloc-"+m] > 0 }
	for r := 0; r < controlMaxRounds() && (r < 2*crashRounds() || !caught("prefix") || !caught("sectors")); r++ {
		seed := uint64(970000 + r)
		v := variants[r%len(variants)]
		c, _ := crashRoundHooks(seed, v, &Hooks{IndexBeforeSegmentSync: true}, false)
		m := faultModel(v)
		if v.prealloc {
			m = "prealloc-" + m
		}
		if byModel[m] == nil {
			byModel[m] = &crashCounts{}
		}
		byModel[m].add(c)
		if c.refused > 0 || c.lostDurable > 0 {
			failed[m]++
		}
	}
	for _, m := range []string{"prefix", "sectors", "prealloc-prefix", "prealloc-sectors"} {
		c := byModel[m]
		if c == nil {
			t.Fatalf("negative control: no rounds of %s", m)
		}
		t.Logf("IndexBeforeSegmentSync, %s: %d rounds, %d of them refused or losing a DURABLE ack (topics refused %d, acked durable %d, lost durable %d)",
			m, c.rounds, failed[m], c.refused, c.ackedDurable, c.lostDurable)
		if failed[m] == 0 {
			t.Errorf("negative control: an index fsynced before its segment went unnoticed under %s; the power-loss test cannot detect it", m)
		}
	}
}

func testPowerLossProperty(t *testing.T, variants []crashVariant) {
	for vi, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			total := runCrashRounds(t, uint64(vi*100000)+uint64(v.sync)*7000000, v, false, func(c crashCounts) bool {
				return c.ackedDurable > 0 && (!v.prealloc || c.datasyncs > 0 && c.zeroTail > 0)
			})
			t.Logf("%s: %d rounds (%d with batches over a group commit); acked durable %d / written %d / accepted %d; lost durable %d, written %d, accepted %d; topics refused %d; recovered %d entries (recovery cut %d index entries and %d segment bytes holding %d valid entries after a hole, indexed again %d; zero tails %d bytes; %d fdatasyncs)",
				v.name, total.rounds, total.bigGroups, total.ackedDurable, total.ackedWritten, total.ackedAccepted,
				total.lostDurable, total.lostWritten, total.lostAccepted, total.refused, total.recoveredEntries, total.cutEntries, total.truncBytes, total.cutValid, total.reindexed, total.zeroTail, total.datasyncs)
			if total.ackedDurable == 0 {
				t.Fatal("no DURABLE acks at all: the property was not exercised")
			}
			if v.prealloc && (total.datasyncs == 0 || total.zeroTail == 0) {
				t.Fatalf("preallocation not exercised: %d fdatasyncs, %d zero-tail bytes cut", total.datasyncs, total.zeroTail)
			}
		})
	}
}

// TestPowerLossNegativeControl: with the deliberately wrong AckBeforeSync
// (DURABLE answered before any fsync) the same property must fail: some
// DURABLE-acknowledged entry is lost. This proves the property test can fail.
func TestPowerLossNegativeControl(t *testing.T) {
	testPowerLossNegativeControl(t, crashVariants)
}

// TestPowerLossNegativeControlLazy: the negative control with index-sync
// lazy; it must fail the same way.
func TestPowerLossNegativeControlLazy(t *testing.T) {
	testPowerLossNegativeControl(t, lazyVariants())
}

func testPowerLossNegativeControl(t *testing.T, variants []crashVariant) {
	var total crashCounts
	// Per fault model: the sector model must catch the bug on its own,
	// not only thanks to the older models.
	byModel := map[string]*crashCounts{}
	lostIn := func(m string) bool { return byModel[m] != nil && byModel[m].lostDurable > 0 }
	// At least 2×crashRounds rounds; then on, up to 10×, until every fault
	// model has lost something (a power loss strikes between the early
	// ack and the fsync in only some rounds, and the sector model keeps
	// the unsynced bytes now and then).
	for r := 0; r < controlMaxRounds() && (r < 2*crashRounds() || !lostIn("prefix") || !lostIn("sectors")); r++ {
		seed := uint64(900000 + r)
		v := variants[r%len(variants)]
		c, violations := crashRound(seed, v, true, false)
		for _, s := range violations {
			t.Errorf("seed %d: %s", seed, s) // only the ack may be wrong, not the disk
		}
		total.add(c)
		m := faultModel(v)
		if byModel[m] == nil {
			byModel[m] = &crashCounts{}
		}
		byModel[m].add(c)
	}
	t.Logf("AckBeforeSync: %d rounds; acked durable %d, lost durable %d (lost written %d, accepted %d)",
		total.rounds, total.ackedDurable, total.lostDurable, total.lostWritten, total.lostAccepted)
	for _, m := range []string{"prefix", "sectors"} {
		c := byModel[m]
		if c == nil {
			t.Fatalf("negative control: no rounds of the %s fault model", m)
		}
		t.Logf("AckBeforeSync, %s fault model: %d rounds; acked durable %d, lost durable %d", m, c.rounds, c.ackedDurable, c.lostDurable)
		if c.lostDurable == 0 {
			t.Errorf("negative control: acknowledging before fsync lost nothing under the %s fault model; the power-loss test cannot detect the bug", m)
		}
	}
}

// faultModel groups a variant's crash options: "sectors" for the
// sector-granular model (SectorSize set), "prefix" for the torn, zero-filled
// and dropped tails.
func faultModel(v crashVariant) string {
	if v.opts.SectorSize > 0 {
		return "sectors"
	}
	return "prefix"
}

// TestCrashAtNamedPoints takes the crash snapshot inside each write-path
// hook, while a DURABLE batch of 3 entries is in flight after 5 acked ones,
// and checks what the write order (see the package doc) and repair's rule
// for the last segment imply, in both index-sync modes. In lazy mode the 5
// acked entries are in an index that was never fsynced (the interval is an
// hour), so every lazy row also proves they come back from the segment.
func TestCrashAtNamedPoints(t *testing.T) {
	const acked, inflight = 5, 3
	entrySize := EntrySize(len(payload(0, 40)))
	type expect struct {
		min, max int64 // hw after reopening the snapshot
	}
	tests := []struct {
		point string
		copts vfs.CrashOptions
		// segMax: rotation threshold; fill: 0 = big segment.
		segMax      int64
		ackBefore   bool
		want        expect
		lone        bool // put the rotation's lone empty .mmm back (a real FS may keep it)
		lazy        bool // index-sync lazy
		wantActions string
	}{
		{point: "AfterSegmentWrite", want: expect{acked, acked}},
		// A torn write keeps a prefix of the batch: its complete entries
		// are valid and contiguous, so they are indexed again.
		{point: "AfterSegmentWrite", copts: vfs.CrashOptions{TornTail: true}, want: expect{acked, acked + inflight}},
		{point: "AfterSegmentWrite", copts: vfs.CrashOptions{ZeroFillTail: true}, want: expect{acked, acked}, wantActions: "cut a zero tail of 144 bytes"},
		// The segment is fsynced: the batch is durable there, never
		// acknowledged, and indexed again (at least once for its producer).
		{point: "AfterSegmentSync", want: expect{acked + inflight, acked + inflight}, wantActions: "index again 3 entries"},
		{point: "AfterIndexWrite", want: expect{acked + inflight, acked + inflight}, wantActions: "index again 3 entries"},
		{point: "AfterIndexWrite", copts: vfs.CrashOptions{ZeroFillTail: true}, want: expect{acked + inflight, acked + inflight}, wantActions: "cut a zero tail of 3 index entries"},
		{point: "AfterIndexWrite", copts: vfs.CrashOptions{TornTail: true}, want: expect{acked + inflight, acked + inflight}},
		{point: "AfterIndexSync", want: expect{acked + inflight, acked + inflight}},
		{point: "AfterIndexSync", copts: vfs.CrashOptions{TornTail: true, ZeroFillTail: true}, want: expect{acked + inflight, acked + inflight}},
		// Segment full after the acked entries: rotation is the first step
		// of the in-flight batch; the new file's entry is not durable yet.
		{point: "AfterRotateSegment", segMax: acked * entrySize, want: expect{acked, acked}},
		{point: "AfterRotateSegment", segMax: acked * entrySize, lone: true, want: expect{acked, acked}, wantActions: "complete interrupted rotation"},
		// Rotation in the middle of the batch: the part before it was
		// fsynced and published (not yet answered) and survives.
		{point: "AfterRotateSegment", segMax: (acked + 1) * entrySize, want: expect{acked + 1, acked + 1}},

		// Lazy: the index of the acked entries is written, never fsynced.
		{lazy: true, point: "AfterSegmentWrite", want: expect{acked, acked}, wantActions: "index again 5 entries"},
		{lazy: true, point: "AfterSegmentWrite", copts: vfs.CrashOptions{TornTail: true}, want: expect{acked, acked + inflight}},
		{lazy: true, point: "AfterSegmentWrite", copts: vfs.CrashOptions{ZeroFillTail: true}, want: expect{acked, acked}, wantActions: "cut a zero tail of 144 bytes"},
		{lazy: true, point: "AfterSegmentSync", want: expect{acked + inflight, acked + inflight}, wantActions: "index again 8 entries"},
		{lazy: true, point: "AfterIndexWrite", want: expect{acked + inflight, acked + inflight}, wantActions: "index again 8 entries"},
		{lazy: true, point: "AfterIndexWrite", copts: vfs.CrashOptions{ZeroFillTail: true}, want: expect{acked + inflight, acked + inflight}, wantActions: "cut a zero tail of 7 index entries"},
		{lazy: true, point: "AfterAnswer", want: expect{acked + inflight, acked + inflight}, wantActions: "index again 8 entries"},
		{lazy: true, point: "AfterAnswer", copts: vfs.CrashOptions{TornTail: true}, want: expect{acked + inflight, acked + inflight}},
		{lazy: true, point: "AfterAnswer", copts: vfs.CrashOptions{TornTail: true, ZeroFillTail: true}, want: expect{acked + inflight, acked + inflight}},
		// A rotation fsyncs the full segment's index before it creates the
		// next segment: crashing just before, the full segment is still
		// the last one and its entries come back from the segment.
		{lazy: true, point: "BeforeSealIndexSync", segMax: (acked + 1) * entrySize, want: expect{acked + 1, acked + 1}, wantActions: "index again 6 entries"},
		{lazy: true, point: "AfterRotateSegment", segMax: (acked + 1) * entrySize, want: expect{acked + 1, acked + 1}},
		{lazy: true, point: "AfterRotateSegment", segMax: acked * entrySize, lone: true, want: expect{acked, acked}, wantActions: "complete interrupted rotation"},
	}
	for _, tc := range tests {
		name := fmt.Sprintf("%s/torn=%v,zero=%v,segMax=%d,lone=%v,lazy=%v", tc.point, tc.copts.TornTail, tc.copts.ZeroFillTail, tc.segMax, tc.lone, tc.lazy)
		t.Run(name, func(t *testing.T) {
			for seed := uint64(0); seed < 8; seed++ {
				fsys := vfs.NewMem()
				var armed atomic.Bool
				var snap *vfs.MemFS
				copts := tc.copts
				copts.Rand = rand.New(rand.NewPCG(seed, 5))
				var logRef atomic.Pointer[Log]
				crash := func() {
					// AfterAnswer comes after the answers: the last acked
					// entry's group may reach it after the test armed the
					// crash. Only the in-flight batch's counts.
					if tc.point == "AfterAnswer" && logRef.Load().HighWatermark() < acked+inflight {
						return
					}
					if armed.CompareAndSwap(true, false) {
						snap = fsys.Crash(copts)
					}
				}
				h := &Hooks{}
				switch tc.point {
				case "AfterSegmentWrite":
					h.AfterSegmentWrite = crash
				case "AfterSegmentSync":
					h.AfterSegmentSync = crash
				case "AfterIndexWrite":
					h.AfterIndexWrite = crash
				case "AfterIndexSync":
					h.AfterIndexSync = crash
				case "AfterRotateSegment":
					h.AfterRotateSegment = crash
				case "AfterAnswer":
					h.AfterAnswer = crash
				case "BeforeSealIndexSync":
					h.BeforeSealIndexSync = crash
				}
				segMax := tc.segMax
				if segMax == 0 {
					segMax = 1 << 20
				}
				mode := IndexSyncCommit
				if tc.lazy {
					mode = IndexSyncLazy
				}
				l := openMem(t, fsys, Options{SegmentMaxBytes: segMax, Hooks: h, IndexSync: mode, IndexSyncInterval: time.Hour})
				logRef.Store(l)
				for i := 0; i < acked; i++ {
					mustAppend(t, l, payload(i, 40))
				}
				armed.Store(true)
				batch := [][]byte{payload(acked, 40), payload(acked+1, 40), payload(acked+2, 40)}
				if first, err := l.AppendBatch(context.Background(), batch, contract.Durable); err != nil || first != acked {
					t.Fatalf("in-flight batch: %d %v", first, err)
				}
				l.Close()
				if snap == nil {
					t.Fatalf("hook %s never ran", tc.point)
				}
				if tc.lone {
					if err := snap.WriteFile(mmmOf(acked), nil, true); err != nil {
						t.Fatal(err)
					}
				}
				rl := openMem(t, snap, Options{SegmentMaxBytes: segMax})
				hw := rl.HighWatermark()
				if hw < tc.want.min || hw > tc.want.max {
					t.Fatalf("seed %d: hw %d after crash at %s, want [%d, %d] (report %+v)", seed, hw, tc.point, tc.want.min, tc.want.max, rl.Repair())
				}
				requirePayloads(t, readAll(t, rl, 100), 40)
				if tc.wantActions != "" && !strings.Contains(strings.Join(rl.Repair().Actions, "|"), tc.wantActions) {
					t.Fatalf("actions %q, want one containing %q", rl.Repair().Actions, tc.wantActions)
				}
				// The log accepts writes at hw after the crash.
				if off := mustAppend(t, rl, payload(int(hw), 40)); off != hw {
					t.Fatalf("append after recovery: %d", off)
				}
				rl.Close()
			}
		})
	}
}

// TestCrashNamedNegativeControl: deterministic version of the negative
// control. The crash snapshot is taken as the segment fsync of a DURABLE
// append starts. The correct engine has not answered the append at that
// point, so nothing acknowledged is lost; AckBeforeSync has answered it, and
// the acknowledged entry is lost. Whether the answer came before the crash
// is read inside the hook, on the writer goroutine, from the append's answer
// channel (see queueDurable), so it does not depend on when the appending
// goroutine gets to run.
func TestCrashNamedNegativeControl(t *testing.T) {
	for _, wrong := range []bool{false, true} {
		t.Run(fmt.Sprintf("AckBeforeSync=%v", wrong), func(t *testing.T) {
			fsys := vfs.NewMem()
			l := openMem(t, fsys, Options{Hooks: &Hooks{AckBeforeSync: wrong}})
			defer l.Close()
			mustAppend(t, l, payload(0, 40))
			// AckBeforeSync answers before the fsyncs: wait until they are
			// done, so that the hook below sees the next batch's only.
			waitHighWatermark(t, l, 1)
			answer := make(chan result, 1)
			var snap *vfs.MemFS
			ackedBeforeCrash := false
			crashed := make(chan struct{})
			fsys.SetHook(func(op vfs.Op, name string) error {
				if op == vfs.OpSync && strings.HasSuffix(name, SegmentExt) && snap == nil {
					ackedBeforeCrash = len(answer) == 1
					snap = fsys.Crash(vfs.CrashOptions{})
					close(crashed)
				}
				return nil
			})
			queueDurable(t, l, answer, payload(1, 40))
			<-crashed // before receiving: the hook looks at the channel's length
			res := <-answer
			if res.err != nil || res.first != 1 {
				t.Fatalf("DURABLE append: offset %d, %v; want 1", res.first, res.err)
			}
			fsys.SetHook(nil)
			rl := openMem(t, snap, Options{})
			defer rl.Close()
			if ackedBeforeCrash != wrong {
				t.Fatalf("AckBeforeSync=%v: DURABLE answered before the segment fsync = %v", wrong, ackedBeforeCrash)
			}
			ackedAndLost := ackedBeforeCrash && rl.HighWatermark() <= res.first
			if ackedAndLost != wrong {
				t.Fatalf("AckBeforeSync=%v: DURABLE-acked offset %d lost = %v (hw %d)", wrong, res.first, ackedAndLost, rl.HighWatermark())
			}
		})
	}
}

// TestPowerLossNewRootDir: a topic whose root directory (and its parents)
// Open creates itself survives a power loss right after a DURABLE ack:
// every new directory's entry must be made durable, not only the topic's.
func TestPowerLossNewRootDir(t *testing.T) {
	for _, dir := range []string{"data/orders", "var/lib/mmmq/data/orders", "orders"} {
		fsys := vfs.NewMem()
		l, err := Open(dir, Options{FS: fsys, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		off, err := l.Append(context.Background(), []byte(`{"a":1}`), contract.Durable)
		if err != nil {
			t.Fatal(err)
		}
		snap := fsys.Crash(vfs.CrashOptions{})
		l.Close()
		l2, err := Open(dir, Options{FS: snap, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		if l2.HighWatermark() <= off {
			t.Errorf("%s: DURABLE-acked offset %d lost with the new directories (hw %d)", dir, off, l2.HighWatermark())
		}
		l2.Close()
	}
}

// runCrashRounds runs crashRounds() rounds of variant v from seed base
// (retain: with retention passes), failing the test at the first round
// with a violation or a lost DURABLE acknowledgement, and returns the sums.
// Past those rounds it goes on while exercised(sums) is false, up to the
// count of a run without the race detector (50, 25 for a lazy variant), so
// that the few rounds under the race detector still reach what the
// caller checks was exercised (a zero tail cut, a deletion that survived).
func runCrashRounds(t *testing.T, base uint64, v crashVariant, retain bool, exercised func(crashCounts) bool) crashCounts {
	t.Helper()
	var total crashCounts
	rounds, full := crashRounds(), 50
	if v.sync == IndexSyncLazy {
		rounds, full = max(rounds/2, 3), 25 // three intervals per crash variant
	}
	for r := 0; r < max(rounds, full) && (r < rounds || !exercised(total)); r++ {
		seed := base + uint64(r)
		c, violations := crashRound(seed, v, false, retain)
		for _, s := range violations {
			t.Errorf("seed %d: %s", seed, s)
		}
		if c.lostDurable > 0 {
			t.Errorf("seed %d: %d DURABLE-acknowledged entries lost", seed, c.lostDurable)
		}
		total.add(c)
		if t.Failed() {
			t.FailNow()
		}
	}
	return total
}
