package topicqueuetest_test

import (
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue/topicqueuetest"
)

// The in-memory fake keeps the contract the rest of the broker relies on
// (it forgets a closed topic: Volatile).
func TestLogConformanceMemory(t *testing.T) {
	b := &topicqueuetest.MemBackend{MaxRecordBytes: 4096}
	topicqueuetest.RunLogConformance(t, topicqueuetest.Conformance{
		Open: func(t *testing.T, topic string) contract.Log {
			l, err := b.Open(topic, true)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return l
		},
		MaxRecordBytes: 4096,
		Volatile:       true,
	})
}
