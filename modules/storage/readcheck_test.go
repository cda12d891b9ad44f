package storage

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// An index entry that comes to point backwards (at an earlier entry) while
// the log is open must be reported by reads as a CorruptionError for that
// offset instead of returning the earlier message; its neighbours stay
// readable. (At startup, recovery refuses such an index.)
func TestReadBatchRejectsBackwardIndexEntry(t *testing.T) {
	fsys := vfs.NewMem()
	dir := "root/t"
	l, err := Open(dir, Options{FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := l.Append(context.Background(), []byte(fmt.Sprintf(`{"i":%d}`, i)), Durable); err != nil {
			t.Fatal(err)
		}
	}
	defer l.Close()
	// Damage the index after open (startup recovery would refuse it).
	idx := filepath.Join(dir, SegmentName(0)+IndexExt)
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
	var ce *CorruptionError
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
