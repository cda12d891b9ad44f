package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// segmentBases lists the start offsets of the segments on disk.
func segmentBases(t *testing.T, fsys vfs.FS) []int64 {
	t.Helper()
	ents, err := fsys.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, e := range ents {
		if b, ok := parseSegmentName(e.Name, SegmentExt); ok {
			out = append(out, b)
		}
	}
	return out
}

func TestRoundTripManySegments(t *testing.T) {
	fsys := vfs.NewMem()
	opts := Options{SegmentMaxBytes: 300}
	l := openMem(t, fsys, opts)
	rng := rand.New(rand.NewPCG(1, 1))
	var want [][]byte
	for len(want) < 600 {
		if rng.IntN(3) == 0 {
			n := 1 + rng.IntN(12)
			batch := make([][]byte, n)
			for i := range batch {
				batch[i] = payload(len(want)+i, 2+rng.IntN(120))
			}
			first, err := l.AppendBatch(context.Background(), batch, contract.Durable)
			if err != nil || first != int64(len(want)) {
				t.Fatalf("append batch: %d %v, want first %d", first, err, len(want))
			}
			want = append(want, batch...)
			continue
		}
		p := payload(len(want), 2+rng.IntN(120))
		if off := mustAppend(t, l, p); off != int64(len(want)) {
			t.Fatalf("offset %d, want %d", off, len(want))
		}
		want = append(want, p)
	}
	// Minimum payload ("{}"-sized) must round-trip too.
	want = append(want, []byte(`{}`))
	mustAppend(t, l, []byte(`{}`))
	hw := int64(len(want))

	check := func(l *Log) {
		t.Helper()
		if l.HighWatermark() != hw {
			t.Fatalf("hw %d, want %d", l.HighWatermark(), hw)
		}
		bases := segmentBases(t, fsys)
		if len(bases) < 20 {
			t.Fatalf("only %d segments", len(bases))
		}
		if st := l.Stats(); st.Segments != len(bases) || st.ActiveSegment != bases[len(bases)-1] || st.NextOffset != hw {
			t.Fatalf("stats %+v, bases %v", st, bases)
		}
		for off := int64(0); off < hw; off++ {
			p, err := l.Read(off)
			if err != nil || !bytes.Equal(p, want[off]) {
				t.Fatalf("Read(%d) = %q, %v; want %q", off, p, err, want[off])
			}
		}
		for _, max := range []int{1, 2, 3, 5, 7, 64, 10000} {
			got := readAll(t, l, max)
			for i, e := range got {
				if !bytes.Equal(e.Payload, want[i]) {
					t.Fatalf("max %d: offset %d = %q", max, i, e.Payload)
				}
			}
		}
		// A batch never crosses a segment end: from any offset it returns
		// exactly up to the next segment start (or max).
		for i, b := range bases {
			end := hw
			if i+1 < len(bases) {
				end = bases[i+1]
			}
			for _, from := range []int64{b, end - 1, (b + end) / 2} {
				if from < b || from >= end {
					continue
				}
				es, err := l.ReadBatch(from, 1<<20)
				if err != nil || int64(len(es)) != end-from {
					t.Fatalf("ReadBatch(%d) in segment [%d,%d): %d entries, %v", from, b, end, len(es), err)
				}
				if es, _ := l.ReadBatch(from, 1); len(es) != 1 || es[0].Offset != from {
					t.Fatalf("ReadBatch(%d, 1) = %v", from, es)
				}
			}
		}
		if es, err := l.ReadBatch(hw, 10); es != nil || err != nil {
			t.Fatalf("ReadBatch(hw) = %v, %v", es, err)
		}
		if es, err := l.ReadBatch(0, 0); es != nil || err != nil {
			t.Fatalf("ReadBatch(0, 0) = %v, %v", es, err)
		}
		if _, err := l.ReadBatch(-1, 10); !errors.Is(err, contract.ErrOutOfRange) {
			t.Fatalf("ReadBatch(-1): %v", err)
		}
		for _, off := range []int64{-1, hw, hw + 100} {
			if _, err := l.Read(off); !errors.Is(err, contract.ErrOutOfRange) {
				t.Fatalf("Read(%d): %v", off, err)
			}
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openMem(t, fsys, opts)
	defer l.Close()
	if !l.Repair().Clean() {
		t.Fatalf("clean reopen reported %+v", l.Repair())
	}
	check(l)
	// Appends continue at hw after reopen.
	if off := mustAppend(t, l, []byte(`"after"`)); off != hw {
		t.Fatalf("append after reopen: %d, want %d", off, hw)
	}
}

// TestReadBatchBudget: a batch of large entries stops near the 1 MiB read
// budget instead of reading the whole segment at once.
func TestReadBatchBudget(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	defer l.Close()
	big := 200 << 10
	for i := 0; i < 12; i++ {
		mustAppend(t, l, payload(i, big))
	}
	es, err := l.ReadBatch(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) == 0 || len(es) >= 12 {
		t.Fatalf("one batch returned %d of 12 entries of 200 KiB", len(es))
	}
	var sum int
	for _, e := range es {
		sum += len(e.Payload)
	}
	if sum > readBudget+big+HeaderSize {
		t.Fatalf("batch of %d bytes exceeds the budget", sum)
	}
	if got := readAll(t, l, 100); len(got) != 12 {
		t.Fatalf("%d entries", len(got))
	}
	// A single entry larger than the budget is still returned.
	l2fs := vfs.NewMem()
	l2 := openMem(t, l2fs, Options{MaxRecordBytes: 3 << 20})
	defer l2.Close()
	mustAppend(t, l2, payload(0, 2<<20))
	mustAppend(t, l2, payload(1, 10))
	if es, err := l2.ReadBatch(0, 10); err != nil || len(es) != 1 || len(es[0].Payload) != 2<<20 {
		t.Fatalf("huge entry: %d entries, %v", len(es), err)
	}
}

func TestAckLevels(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{SegmentMaxBytes: 256})
	defer l.Close()
	ctx := context.Background()
	off, err := l.Append(ctx, []byte(`{"a":"written"}`), contract.Written)
	if err != nil || off != 0 {
		t.Fatalf("WRITTEN: %d, %v", off, err)
	}
	off, err = l.Append(ctx, []byte(`{"a":"accepted"}`), contract.Accepted)
	if err != nil || off != -1 {
		t.Fatalf("ACCEPTED: %d, %v (want -1: no offset promised)", off, err)
	}
	// ACCEPTED becomes visible, at offset 1.
	waitHighWatermark(t, l, 2)
	if p, err := l.Read(1); err != nil || string(p) != `{"a":"accepted"}` {
		t.Fatalf("Read(1) = %q, %v", p, err)
	}
	off, err = l.Append(ctx, []byte(`{"a":"durable"}`), contract.Durable)
	if err != nil || off != 2 || l.HighWatermark() < 3 {
		t.Fatalf("DURABLE: %d, %v, hw %d (durable must be visible on return)", off, err, l.HighWatermark())
	}
	if p, _ := l.Read(0); string(p) != `{"a":"written"}` {
		t.Fatalf("Read(0) = %q", p)
	}
	if _, err := l.Append(ctx, []byte(`{}`), contract.AckLevel(9)); err == nil {
		t.Fatal("invalid ack level accepted")
	}
	for s, want := range map[string]contract.AckLevel{"": contract.Durable, "DURABLE": contract.Durable, " written ": contract.Written, "Accepted": contract.Accepted} {
		if got, err := contract.ParseAckLevel(s); err != nil || got != want {
			t.Fatalf("ParseAckLevel(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := contract.ParseAckLevel("fsync"); err == nil {
		t.Fatal("ParseAckLevel accepted garbage")
	}
	if contract.Durable.String() != "DURABLE" || contract.Written.String() != "WRITTEN" || contract.Accepted.String() != "ACCEPTED" {
		t.Fatal("AckLevel.String")
	}
}

// TestWrittenAckBeforeIndexSync: WRITTEN is answered after both write(2)s,
// before the index fsync; DURABLE only after it.
func TestWrittenAckBeforeIndexSync(t *testing.T) {
	fsys := vfs.NewMem()
	afterIndexWrite := newGate(t)
	var hold atomic.Bool
	l := openMem(t, fsys, Options{Hooks: &Hooks{AfterIndexWrite: func() {
		if hold.Load() {
			afterIndexWrite.wait()
		}
	}}})
	indexSync := newGate(t)
	closeAtEnd(t, l, afterIndexWrite, indexSync)

	// A DURABLE append held after both writes, before the index fsync, is
	// not answered and not visible.
	hold.Store(true)
	durable := make(chan error, 1)
	go func() {
		_, err := l.Append(context.Background(), []byte(`{"d":1}`), contract.Durable)
		durable <- err
	}()
	<-afterIndexWrite.entered
	select {
	case err := <-durable:
		t.Fatalf("DURABLE answered before the index fsync: %v", err)
	default:
	}
	if hw := l.HighWatermark(); hw != 0 {
		t.Fatalf("hw moved to %d before the index fsync", hw)
	}
	hold.Store(false)
	afterIndexWrite.open()
	if err := <-durable; err != nil {
		t.Fatal(err)
	}

	// A WRITTEN append held in the index fsync is answered, and is not
	// visible until the fsync returns.
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, IndexExt) {
			indexSync.wait()
		}
		return nil
	})
	off, err := l.Append(context.Background(), []byte(`{"w":1}`), contract.Written)
	if err != nil || off != 1 {
		t.Fatalf("WRITTEN: %d %v", off, err)
	}
	<-indexSync.entered
	if hw := l.HighWatermark(); hw != 1 {
		t.Fatalf("hw %d while the index fsync is pending, want 1", hw)
	}
	fsys.SetHook(nil)
	indexSync.open()
	waitHighWatermark(t, l, 2)
}

// TestNothingReadableDuringIndexFsync: while the writer is inside the index
// fsync of a batch, nothing of that batch is visible: not by
// HighWatermark, Read, ReadBatch or Notify, whatever level its appends
// asked for, and a DURABLE batch is not answered. The writer is held in the
// fsync itself and the answer is read from its channel (see queueDurable),
// so the checks do not depend on timing.
func TestNothingReadableDuringIndexFsync(t *testing.T) {
	for _, level := range []contract.AckLevel{contract.Accepted, contract.Written, contract.Durable} {
		t.Run(level.String(), func(t *testing.T) {
			fsys := vfs.NewMem()
			l := openMem(t, fsys, Options{})
			indexSync := newGate(t)
			closeAtEnd(t, l, indexSync)
			for i := 0; i < 3; i++ {
				mustAppend(t, l, payload(i, 20))
			}
			fsys.SetHook(func(op vfs.Op, name string) error {
				if op == vfs.OpSync && strings.HasSuffix(name, IndexExt) {
					indexSync.wait()
				}
				return nil
			})
			batch := [][]byte{payload(3, 20), payload(4, 20)}
			answered := make(chan result, 1)
			if level == contract.Durable {
				queueDurable(t, l, answered, batch...)
			} else {
				go func() {
					first, err := l.AppendBatch(context.Background(), batch, level)
					answered <- result{first, err}
				}()
			}
			<-indexSync.entered
			if hw := l.HighWatermark(); hw != 3 {
				t.Fatalf("high watermark %d during the index fsync, want 3", hw)
			}
			if p, err := l.Read(3); !errors.Is(err, contract.ErrOutOfRange) {
				t.Fatalf("Read(3) during the index fsync = %q, %v; want contract.ErrOutOfRange", p, err)
			}
			if es, err := l.ReadBatch(3, 10); len(es) != 0 || err != nil {
				t.Fatalf("ReadBatch(3) during the index fsync = %d entries, %v; want none", len(es), err)
			}
			if es, err := l.ReadBatch(0, 10); len(es) != 3 || err != nil {
				t.Fatalf("ReadBatch(0) during the index fsync = %d entries, %v; want the 3 durable ones", len(es), err)
			}
			if !isClosed(l.Notify(2)) || isClosed(l.Notify(3)) {
				t.Fatal("Notify(3) closed during the index fsync, or Notify(2) not closed")
			}
			if level == contract.Durable && len(answered) != 0 {
				t.Fatal("DURABLE answered during the index fsync")
			}
			fsys.SetHook(nil)
			indexSync.open()
			if res := <-answered; res.err != nil {
				t.Fatal(res.err)
			}
			waitHighWatermark(t, l, 5)
		})
	}
}

func TestNotify(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	for i := 0; i < 3; i++ {
		mustAppend(t, l, payload(i, 10))
	}
	hw := l.HighWatermark()
	if !isClosed(l.Notify(hw-1)) || !isClosed(l.Notify(0)) || !isClosed(l.Notify(-1)) {
		t.Fatal("Notify below hw not closed")
	}
	at, past := l.Notify(hw), l.Notify(hw+1)
	if isClosed(at) || isClosed(past) {
		t.Fatal("Notify(hw) closed before anything was appended")
	}
	if l.Notify(hw) != at {
		t.Fatal("two waiters for the same offset got different channels")
	}
	mustAppend(t, l, payload(3, 10))
	if !isClosed(at) {
		t.Fatal("Notify(hw) not closed after an append")
	}
	// The publish that moved the high watermark to hw+1 is not past hw+1:
	// neither the channel handed out before it nor a fresh one is closed.
	if isClosed(past) || isClosed(l.Notify(hw+1)) {
		t.Fatalf("Notify(%d) closed with the high watermark at %d", hw+1, l.HighWatermark())
	}
	// Concurrent waiters all wake, once, when the watermark passes their
	// offset.
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-l.Notify(hw + 3)
			if got := l.HighWatermark(); got <= hw+3 {
				t.Errorf("Notify(%d) closed with the high watermark at %d", hw+3, got)
			}
		}()
	}
	for i := 4; i < 7; i++ {
		mustAppend(t, l, payload(i, 10))
	}
	wg.Wait()
	if !isClosed(past) {
		t.Fatalf("Notify(%d) not closed with the high watermark at %d", hw+1, l.HighWatermark())
	}
	last := l.Notify(1000)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !isClosed(last) || !isClosed(l.Notify(5000)) {
		t.Fatal("Notify not closed on Close")
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestNotifyNeverEarly (run with -race): while appenders move the high
// watermark one group commit at a time, waiters for offsets at and ahead
// of it never see their channel closed before the watermark passes their
// offset, and all of them wake by the end.
func TestNotifyNeverEarly(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	defer l.Close()
	const total = 400
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			for hw := l.HighWatermark(); hw < total; hw = l.HighWatermark() {
				off := min(hw+rng.Int64N(4), total-1) // total-1 is the last offset appended
				<-l.Notify(off)
				if got := l.HighWatermark(); got <= off {
					t.Errorf("Notify(%d) closed with the high watermark at %d", off, got)
					return
				}
			}
		}()
	}
	var appenders sync.WaitGroup
	for a := 0; a < 2; a++ {
		appenders.Add(1)
		go func() {
			defer appenders.Done()
			for i := 0; i < total/2; i++ {
				if _, err := l.Append(context.Background(), payload(i, 20), contract.AckLevel(1+i%3)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	appenders.Wait()
	waitHighWatermark(t, l, total)
	wg.Wait()
}

var errEIO = fmt.Errorf("injected: %w", syscall.EIO)

func TestFsyncErrorFailsLog(t *testing.T) {
	for _, tc := range []struct {
		name   string
		op     vfs.Op
		suffix string
		// hwAfterReopen: what reopening the same (not crashed) FS recovers
		// to; the index fsync failure leaves an index entry in the page
		// cache that points at fsynced data, so it may reappear.
		reopen []int64
		// crash: what a power loss right after the failure recovers to.
		// When the index fsync fails, the segment fsync of the failed
		// batch has succeeded, so its entry is durable in the segment; the
		// failing disk also refuses the fsync of the cut that would take it
		// back (cutAfterFailure), so repair may index it again: a publish
		// answered with an error whose entry exists, as when a reply is
		// lost. Its bytes are the ones written (checked below).
		crash []int64
	}{
		{"segment fsync", vfs.OpSync, SegmentExt, []int64{10}, []int64{10}},
		{"index fsync", vfs.OpSync, IndexExt, []int64{10, 11}, []int64{10, 11}},
		{"segment write", vfs.OpWrite, SegmentExt, []int64{10}, []int64{10}},
		{"index write", vfs.OpWrite, IndexExt, []int64{10}, []int64{10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			l := openMem(t, fsys, Options{SegmentMaxBytes: 128})
			for i := 0; i < 10; i++ {
				mustAppend(t, l, payload(i, 30))
			}
			var fail atomic.Bool
			fail.Store(true)
			fsys.SetHook(func(op vfs.Op, name string) error {
				if fail.Load() && op == tc.op && strings.HasSuffix(name, tc.suffix) {
					return errEIO
				}
				return nil
			})
			_, err := l.Append(context.Background(), payload(10, 30), contract.Durable)
			if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) || errors.Is(err, ErrNoSpace) {
				t.Fatalf("append: %v", err)
			}
			if c := contract.Classify(err); c.Status != 503 || c.Code != contract.CodeTopicFailed || !strings.Contains(err.Error(), "failed (EIO)") {
				t.Fatalf("append: %v classified %+v, want 503 TOPIC_FAILED naming EIO", err, c)
			}
			// fsyncgate: even with the fault gone, nothing is acknowledged.
			fail.Store(false)
			for _, lvl := range []contract.AckLevel{contract.Durable, contract.Written, contract.Accepted} {
				if off, err := l.Append(context.Background(), payload(11, 30), lvl); !errors.Is(err, ErrFailed) || off != -1 {
					t.Fatalf("%s append after failure: %d, %v", lvl, off, err)
				}
			}
			if _, err := l.AppendBatch(context.Background(), [][]byte{payload(12, 30)}, contract.Durable); !errors.Is(err, ErrFailed) {
				t.Fatalf("batch after failure: %v", err)
			}
			if l.HighWatermark() != 10 || !errors.Is(l.Err(), ErrFailed) || l.Stats().Failed == "" {
				t.Fatalf("hw %d err %v stats %+v", l.HighWatermark(), l.Err(), l.Stats())
			}
			// Reads of the good state still work.
			if got := readAll(t, l, 100); len(got) != 10 {
				t.Fatalf("read %d", len(got))
			}
			// A power loss now keeps exactly the good state.
			crashed := fsys.Crash(vfs.CrashOptions{TornTail: true})
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			fsys.SetHook(nil)
			for _, f := range []*vfs.MemFS{crashed, fsys} {
				l2 := openMem(t, f, Options{SegmentMaxBytes: 128})
				hw := l2.HighWatermark()
				if f == crashed && !containsInt(tc.crash, hw) {
					t.Fatalf("after power loss: hw %d, want one of %v", hw, tc.crash)
				}
				if f == fsys && !containsInt(tc.reopen, hw) {
					t.Fatalf("reopen: hw %d, want one of %v", hw, tc.reopen)
				}
				got := readAll(t, l2, 100)
				requirePayloads(t, got, 30)
				if off := mustAppend(t, l2, []byte(`"new"`)); off != hw {
					t.Fatalf("append after reopen at %d, want %d", off, hw)
				}
				l2.Close()
			}
		})
	}
}

func containsInt(s []int64, v int64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestFsyncErrorConcurrent: with many appenders in flight when fsync fails,
// no append that returned an error is later readable as acknowledged, every
// append after the failure fails, and every success is durable.
func TestFsyncErrorConcurrent(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{SegmentMaxBytes: 512})
	var syncs atomic.Int64
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && syncs.Add(1) > 40 {
			return errEIO
		}
		return nil
	})
	type ack struct {
		off int64
		p   []byte
	}
	var mu sync.Mutex
	var acks []ack
	var failedAt atomic.Int64
	failedAt.Store(-1)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				p := []byte(fmt.Sprintf(`{"g":%d,"i":%d}`, g, i))
				off, err := l.Append(context.Background(), p, contract.Durable)
				if err != nil {
					if !errors.Is(err, ErrFailed) {
						t.Errorf("append: %v", err)
					}
					return
				}
				mu.Lock()
				acks = append(acks, ack{off, p})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if l.Err() == nil {
		t.Fatal("log did not fail")
	}
	hw := l.HighWatermark()
	crashed := fsys.Crash(vfs.CrashOptions{})
	l.Close()
	l2 := openMem(t, crashed, Options{SegmentMaxBytes: 512})
	defer l2.Close()
	if l2.HighWatermark() != hw {
		t.Fatalf("after power loss hw %d, before %d", l2.HighWatermark(), hw)
	}
	for _, a := range acks {
		if p, err := l2.Read(a.off); err != nil || !bytes.Equal(p, a.p) {
			t.Fatalf("acked offset %d: %q %v", a.off, p, err)
		}
	}
	t.Logf("%d acked before the failure, hw %d", len(acks), hw)
}

func TestNoSpace(t *testing.T) {
	fsys := vfs.NewMem()
	opts := Options{SegmentMaxBytes: 400}
	l := openMem(t, fsys, opts)
	var acked [][]byte
	for i := 0; i < 5; i++ {
		p := payload(i, 50)
		mustAppend(t, l, p)
		acked = append(acked, p)
	}
	used := int64(0)
	for _, f := range snapshotFS(t, fsys) {
		used += int64(len(f))
	}
	fsys.SetCapacity(used + 300) // room for a few more entries only
	var err error
	for i := 5; i < 100; i++ {
		p := payload(i, 50)
		if _, err = l.Append(context.Background(), p, contract.Durable); err != nil {
			break
		}
		acked = append(acked, p)
	}
	// The write met the full disk: the log failed (TOPIC_FAILED, cause
	// ENOSPC), it was not refused beforehand (ErrNoSpace is the guard's).
	if errors.Is(err, ErrNoSpace) || !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "(ENOSPC)") {
		t.Fatalf("append on a full disk: %v", err)
	}
	if c := contract.Classify(err); c.Status != 503 || c.Code != contract.CodeTopicFailed {
		t.Fatalf("append on a full disk classified %+v, want 503 TOPIC_FAILED", c)
	}
	if _, err := l.Append(context.Background(), []byte(`{}`), contract.Durable); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append after ENOSPC: %v", err)
	}
	if int(l.HighWatermark()) != len(acked) {
		t.Fatalf("hw %d, acked %d", l.HighWatermark(), len(acked))
	}
	l.Close()

	// Reopen with the disk still full: recovery only shrinks files; the
	// acknowledged entries are all there and nothing is corrupt.
	vr, verr := Verify(testDir, Options{FS: fsys}, nil)
	if verr != nil || vr.Status == StatusCorrupt {
		t.Fatalf("verify after ENOSPC: %+v %v", vr, verr)
	}
	l2 := openMem(t, fsys, opts)
	if int(l2.HighWatermark()) != len(acked) {
		t.Fatalf("reopen hw %d, acked %d (report %+v)", l2.HighWatermark(), len(acked), l2.Repair())
	}
	l2.Close()

	// Free space, reopen: writes are accepted again.
	fsys.SetCapacity(0)
	l3 := openMem(t, fsys, opts)
	defer l3.Close()
	for i := 0; i < 20; i++ {
		p := payload(1000+i, 50)
		if off := mustAppend(t, l3, p); off != int64(len(acked)) {
			t.Fatalf("offset %d, want %d", off, len(acked))
		}
		acked = append(acked, p)
	}
	for i, e := range readAll(t, l3, 7) {
		if !bytes.Equal(e.Payload, acked[i]) {
			t.Fatalf("offset %d = %q", i, e.Payload)
		}
	}
}

func TestRecordSizeLimits(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{MaxRecordBytes: 100})
	defer l.Close()
	mustAppend(t, l, payload(0, 100))
	before := snapshotFS(t, fsys)
	syncs := fsys.SyncCount()
	ctx := context.Background()
	for _, tc := range []struct {
		batch [][]byte
		want  error
	}{
		{[][]byte{payload(1, 101)}, contract.ErrRecordTooLarge},
		{[][]byte{make([]byte, 1<<20)}, contract.ErrRecordTooLarge},
		{[][]byte{[]byte(`1`)}, contract.ErrEmptyRecord},
		{[][]byte{{}}, contract.ErrEmptyRecord},
		{[][]byte{nil}, contract.ErrEmptyRecord},
		{nil, contract.ErrEmptyRecord},
		{[][]byte{payload(1, 50), payload(2, 101), payload(3, 50)}, contract.ErrRecordTooLarge},
		{[][]byte{payload(1, 50), {}}, contract.ErrEmptyRecord},
	} {
		for _, lvl := range []contract.AckLevel{contract.Accepted, contract.Written, contract.Durable} {
			off, err := l.AppendBatch(ctx, tc.batch, lvl)
			if !errors.Is(err, tc.want) || off != -1 {
				t.Fatalf("%s batch of %d: %d, %v; want %v", lvl, len(tc.batch), off, err, tc.want)
			}
		}
	}
	// Nothing was written or synced, and the next offset is unchanged.
	sameFiles(t, "rejected appends", before, snapshotFS(t, fsys))
	if fsys.SyncCount() != syncs {
		t.Fatalf("rejected appends caused %d fsyncs", fsys.SyncCount()-syncs)
	}
	if off := mustAppend(t, l, payload(1, 2)); off != 1 {
		t.Fatalf("next offset %d", off)
	}
	if fsys.SyncCount()-syncs != 2 {
		t.Fatalf("%d syncs for one good append", fsys.SyncCount()-syncs)
	}
}

func TestCloseDrainsAccepted(t *testing.T) {
	fsys := vfs.NewMem()
	segmentWrite := newGate(t)
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpWrite && strings.HasSuffix(name, SegmentExt) {
			segmentWrite.wait()
		}
		return nil
	})
	l := openMem(t, fsys, Options{SegmentMaxBytes: 1000})
	closeAtEnd(t, l, segmentWrite)
	const n = 300
	for i := 0; i < n; i++ {
		if off, err := l.Append(context.Background(), payload(i, 20), contract.Accepted); err != nil || off != -1 {
			t.Fatalf("accepted append %d: %d %v", i, off, err)
		}
	}
	<-segmentWrite.entered // the writer is held in the first write; the rest are queued
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	for closing := false; !closing; {
		l.mu.Lock()
		closing = l.closing
		l.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	if _, err := l.Append(context.Background(), []byte(`{}`), contract.Accepted); !errors.Is(err, contract.ErrClosed) {
		t.Fatalf("append while closing: %v", err)
	}
	segmentWrite.open()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), []byte(`{}`), contract.Durable); !errors.Is(err, contract.ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if _, err := l.Read(0); !errors.Is(err, contract.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if _, err := l.Checkpoint("x"); !errors.Is(err, contract.ErrClosed) {
		t.Fatalf("checkpoint after close: %v", err)
	}
	fsys.SetHook(nil)
	// Everything queued was written and made durable before Close returned.
	l2 := openMem(t, fsys.Crash(vfs.CrashOptions{}), Options{SegmentMaxBytes: 1000})
	defer l2.Close()
	got := readAll(t, l2, 1000)
	if len(got) != n {
		t.Fatalf("%d of %d ACCEPTED entries durable after Close", len(got), n)
	}
	requirePayloads(t, got, 20)
}

func TestQueueFullAndContextCancel(t *testing.T) {
	fsys := vfs.NewMem()
	firstSync, cancelSync := newGate(t), newGate(t)
	var hold atomic.Pointer[gate] // the gate fsyncs wait at; nil: none
	fsys.SetHook(func(op vfs.Op, name string) error {
		if g := hold.Load(); g != nil && op == vfs.OpSync {
			g.wait()
		}
		return nil
	})
	l := openMem(t, fsys, Options{MaxPendingBytes: 1000})
	closeAtEnd(t, l, firstSync, cancelSync)
	ctx := context.Background()
	hold.Store(firstSync)
	// The first append is taken by the writer, which is held in its fsync;
	// the next ones queue up to MaxPendingBytes.
	if _, err := l.Append(ctx, payload(0, 100), contract.Accepted); err != nil {
		t.Fatal(err)
	}
	<-firstSync.entered
	var err error
	n := 0
	for ; n < 100; n++ {
		if _, err = l.Append(ctx, payload(n+1, 100), contract.Accepted); err != nil {
			break
		}
	}
	if !errors.Is(err, contract.ErrQueueFull) || n == 0 || n > 10 {
		t.Fatalf("after %d queued: %v", n, err)
	}
	// Drain the queue so a DURABLE append can be queued.
	hold.Store(nil)
	firstSync.open()
	waitHighWatermark(t, l, int64(n+1))
	// A DURABLE append whose context ends while the writer is held in its
	// fsync returns the context's error.
	hold.Store(cancelSync)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cancelled := make(chan error, 1)
	go func() {
		_, err := l.Append(cctx, payload(999, 10), contract.Durable)
		cancelled <- err
	}()
	<-cancelSync.entered
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled append: %v", err)
	}
	hold.Store(nil)
	cancelSync.open()
	// The outcome was unknown to the caller; the entry is written anyway.
	waitHighWatermark(t, l, int64(n+2))
	if p, err := l.Read(int64(n + 1)); err != nil || !bytes.Equal(p, payload(999, 10)) {
		t.Fatalf("cancelled entry: %q %v", p, err)
	}
}

// TestConcurrentReadersDuringWrites (run with -race): readers never see an
// offset at or beyond the high watermark loaded after their read, never a
// torn entry, and what they read equals what ends up in the log.
func TestConcurrentReadersDuringWrites(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{SegmentMaxBytes: 2048})
	const writers, perWriter = 6, 150
	var wg sync.WaitGroup
	done := make(chan struct{})
	type seen struct {
		off int64
		p   string
	}
	var mu sync.Mutex
	var reads []seen
	var readers sync.WaitGroup
	for r := 0; r < 3; r++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			var local []seen
			for {
				select {
				case <-done:
					mu.Lock()
					reads = append(reads, local...)
					mu.Unlock()
					return
				default:
				}
				h1 := l.HighWatermark()
				if h1 == 0 {
					<-l.Notify(0)
					continue
				}
				from := rng.Int64N(h1)
				var es []Entry
				var err error
				if rng.IntN(2) == 0 {
					es, err = l.ReadBatch(from, 1+rng.IntN(50))
				} else {
					var p []byte
					p, err = l.Read(from)
					es = []Entry{{Offset: from, Payload: p}}
				}
				h2 := l.HighWatermark()
				if err != nil || len(es) == 0 {
					t.Errorf("read at %d (hw %d): %d entries, %v", from, h1, len(es), err)
					return
				}
				for i, e := range es {
					if e.Offset != from+int64(i) || e.Offset >= h2 {
						t.Errorf("entry offset %d (from %d, hw after %d)", e.Offset, from, h2)
						return
					}
					var v struct{ G, I int }
					if err := json.Unmarshal(e.Payload, &v); err != nil {
						t.Errorf("torn entry at %d: %q", e.Offset, e.Payload)
						return
					}
					local = append(local, seen{e.Offset, string(e.Payload)})
				}
			}
		}()
	}
	// A tailing reader follows the log with Notify and sees every offset once.
	var tailed []Entry
	readers.Add(1)
	go func() {
		defer readers.Done()
		next := int64(0)
		for next < writers*perWriter {
			<-l.Notify(next - 1)
			es, err := l.ReadBatch(next, 17)
			if err != nil {
				t.Errorf("tail: %v", err)
				return
			}
			for _, e := range es {
				tailed = append(tailed, Entry{Offset: e.Offset, Payload: bytes.Clone(e.Payload)})
			}
			next += int64(len(es))
			if len(es) == 0 {
				<-l.Notify(next)
			}
		}
	}()
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for i := 0; i < perWriter; i++ {
				p := []byte(fmt.Sprintf(`{"g":%d,"i":%d,"pad":"%s"}`, g, i, strings.Repeat("y", rng.IntN(100))))
				if _, err := l.Append(context.Background(), p, contract.AckLevel(1+rng.IntN(3))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	waitHighWatermark(t, l, writers*perWriter)
	close(done)
	readers.Wait()
	final := readAll(t, l, 1000)
	if len(final) != writers*perWriter {
		t.Fatalf("%d entries", len(final))
	}
	for _, s := range reads {
		if string(final[s.off].Payload) != s.p {
			t.Fatalf("reader saw %q at %d, log has %q", s.p, s.off, final[s.off].Payload)
		}
	}
	if len(tailed) != len(final) {
		t.Fatalf("tail saw %d of %d", len(tailed), len(final))
	}
	for i, e := range tailed {
		if e.Offset != int64(i) || !bytes.Equal(e.Payload, final[i].Payload) {
			t.Fatalf("tail offset %d", i)
		}
	}
	t.Logf("%d concurrent reads checked", len(reads))
	l.Close()
}

func TestAppendBatchContiguous(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{SegmentMaxBytes: 300})
	type call struct {
		first int64
		batch [][]byte
	}
	var mu sync.Mutex
	var calls []call
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			for i := 0; i < 30; i++ {
				batch := make([][]byte, 1+rng.IntN(10))
				for j := range batch {
					batch[j] = []byte(fmt.Sprintf(`{"g":%d,"i":%d,"j":%d}`, g, i, j))
				}
				first, err := l.AppendBatch(context.Background(), batch, contract.Durable)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				calls = append(calls, call{first, batch})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, c := range calls {
		total += len(c.batch)
	}
	if int(l.HighWatermark()) != total {
		t.Fatalf("hw %d, appended %d", l.HighWatermark(), total)
	}
	all := readAll(t, l, 1000)
	owner := make([]int, total)
	for ci, c := range calls {
		for j, p := range c.batch {
			off := c.first + int64(j)
			if owner[off] != 0 {
				t.Fatalf("offset %d given twice", off)
			}
			owner[off] = ci + 1
			if !bytes.Equal(all[off].Payload, p) {
				t.Fatalf("batch entry %d at %d = %q, want %q", j, off, all[off].Payload, p)
			}
		}
	}
	if len(segmentBases(t, fsys)) < 10 {
		t.Fatal("batches did not cross segment boundaries")
	}
	l.Close()
}

// TestGroupCommit: concurrent DURABLE appends share fsyncs.
func TestGroupCommit(t *testing.T) {
	fsys := vfs.NewMem()
	// A slow fsync, like a real disk, so that appends pile up behind it.
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync {
			time.Sleep(200 * time.Microsecond)
		}
		return nil
	})
	l := openMem(t, fsys, Options{})
	defer l.Close()
	before := fsys.SyncCount()
	const g, per = 32, 40
	var wg sync.WaitGroup
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < per; j++ {
				if _, err := l.Append(context.Background(), payload(i*per+j, 200), contract.Durable); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	syncs := fsys.SyncCount() - before
	st := l.Stats()
	t.Logf("%d appends, %d fsyncs, %d batches", g*per, syncs, st.Batches)
	if syncs >= g*per/4 {
		t.Fatalf("%d fsyncs for %d concurrent appends: no group commit", syncs, g*per)
	}
	if syncs != 2*st.Batches || st.Fsyncs != syncs {
		t.Fatalf("fsyncs %d (stats %d), batches %d: want one fsync pair per batch", syncs, st.Fsyncs, st.Batches)
	}
}

func TestVerify(t *testing.T) {
	fsys := buildFixture(t)
	var scanned int64
	rep, err := Verify(testDir, Options{FS: fsys, SegmentMaxBytes: fxSegBytes}, func(n int64) { scanned += n })
	if err != nil || rep.Status != StatusOK || rep.Entries != fxEntries || rep.Bytes != fxEntries*fxEntry ||
		scanned != fxEntries*fxEntry || rep.Corruption != nil || len(rep.Checkpoints) != 0 {
		t.Fatalf("clean: %+v, %v, scanned %d", rep, err, scanned)
	}
	// Checkpoint problems are reported, not fixed.
	cp := path.Join(testDir, CheckpointDir)
	fsys.WriteFile(path.Join(cp, "a"+CheckpointExt), []byte{1, 2, 3}, true)
	fsys.WriteFile(path.Join(cp, "b"+CheckpointExt), be64(999), true)
	fsys.WriteFile(path.Join(cp, "c"+CheckpointExt), be64(3), true)
	// Torn tail: reported with what would be cut, files untouched.
	appendFile(t, fsys, mmmOf(fxLastBase), []byte("partial"))
	appendFile(t, fsys, idxOf(fxLastBase), []byte{0, 0})
	before := snapshotFS(t, fsys)
	rep, err = Verify(testDir, Options{FS: fsys, SegmentMaxBytes: fxSegBytes}, nil)
	if err != nil || rep.Status != StatusTornTail || rep.Recovery.TruncatedBytes != 7 || rep.Recovery.CutIndexBytes != 2 ||
		rep.Entries != fxEntries || len(rep.Checkpoints) != 2 {
		t.Fatalf("torn: %+v, %v", rep, err)
	}
	if !strings.Contains(strings.Join(rep.Checkpoints, "|"), "3 bytes") || !strings.Contains(strings.Join(rep.Checkpoints, "|"), "beyond log end") {
		t.Fatalf("checkpoint problems %q", rep.Checkpoints)
	}
	sameFiles(t, "verify", before, snapshotFS(t, fsys))
	// A CRC error deep inside a sealed segment (not seen by recovery).
	patchFile(t, fsys, mmmOf(10), func(b []byte) []byte { b[fxEntry+20] ^= 1; return b })
	rep, err = Verify(testDir, Options{FS: fsys, SegmentMaxBytes: fxSegBytes}, nil)
	if err != nil || rep.Status != StatusCorrupt || rep.Corruption == nil || rep.Corruption.Offset != 11 ||
		rep.Corruption.Pos != fxEntry || !strings.Contains(rep.Corruption.Reason, "crc") {
		t.Fatalf("corrupt: %+v, %v", rep, err)
	}
	// A topic that does not exist is empty and OK.
	rep, err = Verify("nope", Options{FS: fsys}, nil)
	if err != nil || rep.Status != StatusOK || rep.Entries != 0 {
		t.Fatalf("missing topic: %+v %v", rep, err)
	}
}

// TestAnswersNeverCrossCallers: done channels are recycled, so a stale
// answer must never reach a later caller. Many appenders, a third of them
// with a context that ends while the writer is slowed down in fsync; every
// offset a caller is told must hold that caller's own payload.
func TestAnswersNeverCrossCallers(t *testing.T) {
	fsys := vfs.NewMem()
	var syncs atomic.Int64
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && syncs.Add(1)%3 == 0 {
			time.Sleep(200 * time.Microsecond)
		}
		return nil
	})
	l := openMem(t, fsys, Options{})
	// Closed at the end, not deferred: after a failure the writer may be
	// stuck and Close would never return.
	const workers, each = 16, 150
	type ack struct {
		id  int
		off int64
	}
	acks := make(chan ack, workers*each)
	var cancelled atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				id := w*each + i
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if id%3 == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(id%5)*50*time.Microsecond)
				}
				lvl := []contract.AckLevel{contract.Written, contract.Durable}[id%2]
				off, err := l.Append(ctx, payload(id, 60), lvl)
				cancel()
				switch {
				case err == nil:
					acks <- ack{id, off}
				case errors.Is(err, context.DeadlineExceeded):
					cancelled.Add(1)
				default:
					t.Errorf("append %d: %v", id, err)
					return
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		// A stale answer left in a recycled channel blocks the writer.
		t.Fatal("appends did not finish in 30 s: the writer is stuck answering")
	}
	close(acks)
	waitHighWatermark(t, l, workers*each)
	n := 0
	seen := map[int64]int{}
	for a := range acks {
		n++
		if prev, dup := seen[a.off]; dup {
			t.Fatalf("offset %d answered to appends %d and %d", a.off, prev, a.id)
		}
		seen[a.off] = a.id
		p, err := l.Read(a.off)
		if err != nil || !bytes.Equal(p, payload(a.id, 60)) {
			t.Fatalf("append %d was told offset %d, which holds %q (%v)", a.id, a.off, p, err)
		}
	}
	if n+int(cancelled.Load()) != workers*each || n == 0 {
		t.Fatalf("%d answered + %d cancelled, want %d in all", n, cancelled.Load(), workers*each)
	}
	t.Logf("%d answered, %d cancelled before their answer", n, cancelled.Load())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenFileLimitIsExplained: reopening a log when the process is out of
// file descriptors names the cause and the way out (the files per topic and
// the segment cache's setting), and the log opens normally once
// descriptors are back.
func TestOpenFileLimitIsExplained(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{SegmentMaxBytes: 1024})
	for i := 0; i < 40; i++ {
		if _, err := l.Append(context.Background(), payload(i, 200), contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(segmentBases(t, fsys)); n < 3 {
		t.Fatalf("want several segments, got %d", n)
	}
	var opens atomic.Int64
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpOpen && opens.Add(1) > 3 {
			return &os.PathError{Op: "open", Path: name, Err: syscall.EMFILE}
		}
		return nil
	})
	_, err := Open(testDir, Options{FS: fsys, SegmentMaxBytes: 1024})
	if err == nil || !errors.Is(err, syscall.EMFILE) || !strings.Contains(err.Error(), "open-file limit") ||
		!strings.Contains(err.Error(), "max-open-segments") {
		t.Fatalf("open with EMFILE: %v", err)
	}
	fsys.SetHook(nil)
	l2, err := Open(testDir, Options{FS: fsys, SegmentMaxBytes: 1024})
	if err != nil {
		t.Fatalf("reopen once descriptors are back: %v", err)
	}
	l2.Close()
}
