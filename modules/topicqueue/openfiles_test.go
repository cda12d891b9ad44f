package topicqueue

import (
	"context"
	"fmt"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestTopicsShareOneSegmentCache: the local backend's topics share one
// segment cache, so the files open across all of them stay within 2 per
// topic (active segments) plus 2 per cached sealed segment, whatever the
// number of sealed segments; reading every topic back works.
func TestTopicsShareOneSegmentCache(t *testing.T) {
	const topics, capacity = 8, 4
	fsys := vfs.NewCounting(vfs.NewMem())
	r := New(Options{Root: "/data", Storage: storage.Options{FS: fsys, SegmentMaxBytes: 1024, MaxOpenSegments: capacity}})
	defer r.Close()
	msg := func(i int) []byte { return fmt.Appendf(nil, `{"i":%d,"pad":"%0200d"}`, i, 0) }
	for k := 0; k < topics; k++ {
		q, err := r.GetOrCreate(fmt.Sprintf("t%d", k))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 40; i++ {
			if _, err := q.Log().Append(context.Background(), msg(i), contract.Durable); err != nil {
				t.Fatal(err)
			}
		}
		if n := q.Stats().Segments; n < 5 {
			t.Fatalf("topic %d: %d segments, want several", k, n)
		}
	}
	for k := 0; k < topics; k++ {
		q, _ := r.Get(fmt.Sprintf("t%d", k))
		for i := int64(0); i < q.HighWatermark(); i++ {
			p, err := q.Read(i)
			if err != nil || string(p) != string(msg(int(i))) {
				t.Fatalf("topic %d offset %d: %.30q, %v", k, i, p, err)
			}
		}
	}
	// Each rotation briefly holds the new active pair beside the old one.
	if peak, bound := fsys.MaxOpenFiles.Load(), int64(2*topics+2*capacity+2); peak > bound {
		t.Fatalf("%d files open at the peak across %d topics; want <= %d (cache of %d pairs shared)", peak, topics, bound, capacity)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := fsys.OpenFiles.Load(); n != 0 {
		t.Fatalf("%d files open after Close", n)
	}
}
