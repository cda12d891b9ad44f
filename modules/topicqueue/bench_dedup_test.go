package topicqueue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dedup"
)

// BenchmarkDedupRebuild measures what the first publish with an id to a
// topic costs after a restart, when its log holds entries entries with
// producer ids inside the window: the window's rebuild from the log's tail
// (at most max-ids entries read), on the real filesystem. Startup itself
// reads nothing for the window.
//
//	go test -run '^$' -bench DedupRebuild -benchtime 3x ./modules/topicqueue/
func BenchmarkDedupRebuild(b *testing.B) {
	for _, entries := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			root := b.TempDir()
			tr := func() *dedup.Tracker { return dedup.New(dedup.Options{Window: 10 * time.Minute}) }
			reg := New(Options{Root: root, Dedup: tr()})
			q, err := reg.GetOrCreate("t")
			if err != nil {
				b.Fatal(err)
			}
			batch := make([][]byte, 0, 1000)
			for i := 0; i < entries; i++ {
				p, _ := contract.EncodeMessage("t", []byte(`{"order":12345,"note":"a message of about two hundred bytes, as in the other benchmarks of the broker"}`),
					fmt.Sprintf("producer-1-%d", i), nil, time.Now())
				if batch = append(batch, p); len(batch) == cap(batch) || i == entries-1 {
					if _, err := q.Log().AppendBatch(context.Background(), batch, contract.Durable); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			reg.Close()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				reg := New(Options{Root: root, Dedup: tr()})
				if _, err := reg.OpenAll(OnCorruptionFail, zap.NewNop()); err != nil {
					b.Fatal(err)
				}
				m := Message{ID: "producer-1-0"}
				m.Stored, _ = contract.EncodeMessage("t", []byte(`1`), m.ID, nil, time.Now())
				out := make([]Published, 1)
				b.StartTimer()
				if _, err := reg.PublishMessages(context.Background(), "t", []Message{m}, contract.Durable, out); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if !out[0].Duplicate {
					b.Fatalf("the first id was not found after the rebuild: %+v", out[0])
				}
				reg.Close()
				b.StartTimer()
			}
		})
	}
}
