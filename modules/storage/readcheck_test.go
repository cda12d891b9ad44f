package storage

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// An index entry that comes to point backwards (at an earlier entry) while
// the log is open must be reported by reads as a contract.CorruptionError for that
// offset instead of returning the earlier message; its neighbours stay
// readable. (At startup, recovery refuses such an index.)
func TestReadBatchRejectsBackwardIndexEntry(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	for i := 0; i < 10; i++ {
		mustAppend(t, l, []byte(fmt.Sprintf(`{"i":%d}`, i)))
	}
	defer l.Close()
	// Damage the index after open (startup recovery would refuse it).
	idx := filepath.Join(testDir, SegmentName(0)+IndexExt)
	b, err := fsys.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fsys.OpenRW(idx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b[2*8:3*8], 5*8); err != nil { // entry 5 now points at entry 2
		t.Fatal(err)
	}
	f.Close()

	es, err := l.ReadBatch(0, 100)
	var ce *contract.CorruptionError
	if !errors.As(err, &ce) || ce.Offset != 5 || len(es) != 5 {
		t.Fatalf("ReadBatch(0) = %d entries, %v; want 5 entries and corruption at offset 5", len(es), err)
	}
	es, err = l.ReadBatch(5, 100)
	if !errors.As(err, &ce) || ce.Offset != 5 || len(es) != 0 {
		t.Fatalf("ReadBatch(5) = %d entries, %v; want corruption at offset 5", len(es), err)
	}
	es, err = l.ReadBatch(6, 100)
	if err != nil || len(es) != 4 || string(es[0].Payload) != `{"i":6}` {
		t.Fatalf("ReadBatch(6) = %d entries, %v; want offsets 6..9", len(es), err)
	}
}

// A failure to create the next segment (EMFILE, a transient ENOSPC) refuses
// that batch but does not fail the log: the next append rotates and
// succeeds, and nothing acknowledged is lost.
func TestRotationCreateFailureIsNotFatal(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{SegmentMaxBytes: 64})
	defer l.Close()
	ctx := context.Background()
	payload := []byte(`{"pad":"0123456789012345678901234567890123456789012345678901234567"}`)
	mustAppend(t, l, payload) // fills segment 0
	failOnce := true
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpCreate && failOnce && filepath.Base(name) != SegmentName(0)+SegmentExt {
			failOnce = false
			return syscall.EMFILE
		}
		return nil
	})
	if _, err := l.Append(ctx, payload, contract.Durable); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("append during EMFILE: %v", err)
	}
	if l.Err() != nil {
		t.Fatalf("the log failed: %v", l.Err())
	}
	off, err := l.Append(ctx, payload, contract.Durable)
	if err != nil || off != 1 {
		t.Fatalf("append after EMFILE: offset %d, %v", off, err)
	}
	if st := l.Stats(); st.Segments != 2 || st.NextOffset != 2 {
		t.Fatalf("stats %+v", st)
	}
}
