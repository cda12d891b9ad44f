package jetstream

import (
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue/topicqueuetest"
)

// The JetStream backend, on an embedded single-node server, keeps the
// storage seam's contract (the suite every backend runs).
func TestLogConformanceJetStream(t *testing.T) {
	b := connect(t, startServer(t)) // maximum record size 1<<16 (connectWith)
	topicqueuetest.RunLogConformance(t, topicqueuetest.Conformance{
		Open: func(t *testing.T, topic string) contract.Log {
			l, err := b.Open(topic, true)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			return l
		},
		MaxRecordBytes: 1 << 16,
		Delete: func(t *testing.T, topic string) {
			if _, err := b.Delete(topic); err != nil {
				t.Fatalf("Delete: %v", err)
			}
		},
	})
}
