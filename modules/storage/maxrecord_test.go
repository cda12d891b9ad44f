package storage

import (
	"bytes"
	"context"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Lowering max-record-bytes between runs only limits new appends: entries
// written under the old, higher limit stay readable, at the tail and in the
// middle of a segment, and recovery neither cuts nor refuses them.
func TestLoweredMaxRecordBytesKeepsOldEntries(t *testing.T) {
	fsys := vfs.NewMem()
	big := append(append([]byte(`"`), bytes.Repeat([]byte("b"), 3000)...), '"')
	l := openMem(t, fsys, Options{MaxRecordBytes: 4096})
	for _, p := range [][]byte{[]byte(`{"a":0}`), big, []byte(`{"a":2}`), big} {
		mustAppend(t, l, p)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := Open(testDir, Options{FS: fsys, MaxRecordBytes: 1024})
	if err != nil {
		t.Fatalf("reopen with a lower limit: %v", err)
	}
	defer l.Close()
	if hw := l.HighWatermark(); hw != 4 || !l.Repair().Clean() {
		t.Fatalf("hw %d, recovery %+v: acknowledged entries were cut", hw, l.Repair())
	}
	for off := int64(0); off < 4; off++ {
		p, err := l.Read(off)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if off%2 == 1 && !bytes.Equal(p, big) {
			t.Fatalf("Read(%d) = %d bytes", off, len(p))
		}
	}
	for _, from := range []int64{0, 1, 3} {
		es, err := l.ReadBatch(from, 10)
		if err != nil || int64(len(es)) != 4-from {
			t.Fatalf("ReadBatch(%d) = %d entries, %v", from, len(es), err)
		}
	}
	if _, err := l.Append(context.Background(), big, contract.Durable); err == nil {
		t.Fatal("a new append over the lowered limit was accepted")
	}
	rep, err := Verify(testDir, Options{FS: fsys, MaxRecordBytes: 1024}, nil)
	if err != nil || rep.Status != StatusOK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}
