package topicqueue

import (
	"testing"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/storage"
)

// The storage engine owns its defaults (it imports nothing of the
// configuration); mmmq.broker.segment's defaults must be the same numbers.
func TestSegmentDefaultsAreStorages(t *testing.T) {
	got := config.Default().MMMQ.Broker.Segment
	want := config.SegmentConfig{MaxBytes: storage.DefaultSegmentMaxBytes, MaxRecordBytes: storage.DefaultMaxRecordBytes}
	if got != want {
		t.Errorf("config.Default() mmmq.broker.segment = %+v, want storage's defaults %+v", got, want)
	}
}
