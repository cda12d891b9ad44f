package topicqueue_test

import (
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/topicqueue/topicqueuetest"
)

// The local engine, opened through the registry's LocalBackend, keeps the
// storage seam's contract (the suite every backend runs).
func TestLogConformanceLocal(t *testing.T) {
	const maxRecord = 4096
	b := &topicqueue.LocalBackend{Root: t.TempDir(), Storage: storage.Options{Logger: zaptest.NewLogger(t), MaxRecordBytes: maxRecord}}
	topicqueuetest.RunLogConformance(t, topicqueuetest.Conformance{
		Open: func(t *testing.T, topic string) contract.Log {
			l, err := b.Open(topic, true)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return l
		},
		MaxRecordBytes: maxRecord,
		Delete: func(t *testing.T, topic string) {
			if _, err := b.Delete(topic); err != nil {
				t.Fatalf("Delete: %v", err)
			}
		},
	})
}
