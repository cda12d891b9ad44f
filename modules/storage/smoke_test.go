package storage

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

func TestSmokeRoundTripAcrossSegments(t *testing.T) {
	fsys := vfs.NewMem()
	dir := "root/order.created"
	l, err := Open(dir, Options{FS: fsys, SegmentMaxBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				if _, err := l.Append(context.Background(), []byte(fmt.Sprintf(`{"g":%d,"i":%d}`, g, i)), Durable); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if hw := l.HighWatermark(); hw != 200 {
		t.Fatalf("hw = %d", hw)
	}
	var got []Entry
	for off := int64(0); off < 200; {
		es, err := l.ReadBatch(off, 7)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, es...)
		off += int64(len(es))
	}
	if len(got) != 200 {
		t.Fatalf("got %d", len(got))
	}
	p, err := l.Read(150)
	if err != nil || string(p) != string(got[150].Payload) {
		t.Fatalf("read 150: %q %v", p, err)
	}
	st := l.Stats()
	if st.Segments < 5 {
		t.Fatalf("segments = %d", st.Segments)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(dir, Options{FS: fsys, SegmentMaxBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if l2.HighWatermark() != 200 || !l2.Recovery().Clean() {
		t.Fatalf("reopen: hw %d report %+v", l2.HighWatermark(), l2.Recovery())
	}
}
