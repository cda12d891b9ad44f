package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// FuzzRecovery mutates the files of a small topic (XOR bytes into the
// segment and the index, cut either at a length) and reopens it. Whatever
// the bytes, recovery must not panic; a refusal must be a *contract.CorruptionError
// that left every file byte-identical; an accepted log must never show an
// entry that differs from what was written at that offset (reads either
// return the original bytes or a *contract.CorruptionError).
func FuzzRecovery(f *testing.F) {
	f.Add([]byte{}, []byte{}, uint16(0xffff), uint16(0xffff))
	f.Add([]byte{0, 0, 0, 0, 0, 1}, []byte{}, uint16(0xffff), uint16(0xffff))
	f.Add([]byte{}, []byte{0, 0, 0, 0, 0, 0, 0, 8}, uint16(0xffff), uint16(37))
	f.Add([]byte{0xff}, []byte{1}, uint16(50), uint16(16))
	f.Fuzz(func(t *testing.T, mmmXor, idxXor []byte, mmmCut, idxCut uint16) {
		fsys := vfs.NewMem()
		dir := "root/t"
		l, err := Open(dir, Options{FS: fsys})
		if err != nil {
			t.Fatal(err)
		}
		var want [][]byte
		for i := 0; i < 5; i++ {
			p := []byte(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, bytes.Repeat([]byte("x"), i*3)))
			if _, err := l.Append(context.Background(), p, contract.Durable); err != nil {
				t.Fatal(err)
			}
			want = append(want, p)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		mmmPath := filepath.Join(dir, SegmentName(0)+SegmentExt)
		idxPath := filepath.Join(dir, SegmentName(0)+IndexExt)
		mutate := func(path string, xor []byte, cut uint16) []byte {
			b, err := fsys.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for i, x := range xor {
				if len(b) > 0 {
					b[i%len(b)] ^= x
				}
			}
			if int(cut) < len(b) {
				b = b[:cut]
			}
			if err := fsys.WriteFile(path, b, true); err != nil {
				t.Fatal(err)
			}
			return b
		}
		mmm := mutate(mmmPath, mmmXor, mmmCut)
		idx := mutate(idxPath, idxXor, idxCut)

		l, err = Open(dir, Options{FS: fsys})
		var ce *contract.CorruptionError
		if errors.As(err, &ce) {
			m2, _ := fsys.ReadFile(mmmPath)
			i2, _ := fsys.ReadFile(idxPath)
			if !bytes.Equal(m2, mmm) || !bytes.Equal(i2, idx) {
				t.Fatalf("refused (%v) but files were modified", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer l.Close()
		hw := l.HighWatermark()
		if hw < 0 || hw > int64(len(want)) {
			t.Fatalf("high watermark %d after mutation of a 5-entry log", hw)
		}
		for off := int64(0); off < hw; {
			es, err := l.ReadBatch(off, 3)
			for _, e := range es {
				if !bytes.Equal(e.Payload, want[e.Offset]) {
					t.Fatalf("offset %d reads %q, was written %q", e.Offset, e.Payload, want[e.Offset])
				}
			}
			off += int64(len(es))
			if errors.As(err, &ce) {
				off = ce.Offset + 1
				continue
			}
			if err != nil {
				t.Fatalf("read at %d: %v", off, err)
			}
			if len(es) == 0 {
				t.Fatalf("no progress at %d below hw %d", off, hw)
			}
		}
	})
}
