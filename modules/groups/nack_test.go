package groups

import (
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
)

// An offset repeated in one Nack counts once, leased (Nacked) or finished
// (Already), as in AckOffsets.
func TestNackCountsARepeatedOffsetOnce(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(2)
	s, err := e.c.AcquireMode(testTopic, "w", contract.GroupShared)
	if err != nil {
		t.Fatal(err)
	}
	b := e.fetch("w", s, 10, 0)
	b.Release()
	if got, err := e.c.Nack(testTopic, "w", s, []int64{0, 0, 0}, 0); err != nil || got != (NackResult{Committed: 0, Nacked: 1, Already: 0}) {
		t.Fatalf("nack 0,0,0: %+v %v", got, err)
	}
	if _, err := e.c.AckOffsets(testTopic, "w", s, []int64{1}); err != nil {
		t.Fatal(err)
	}
	if got, err := e.c.Nack(testTopic, "w", s, []int64{1, 1}, 0); err != nil || got != (NackResult{Committed: 0, Nacked: 0, Already: 1}) {
		t.Fatalf("nack of the finished 1,1: %+v %v", got, err)
	}
	b = e.fetch("w", s, 10, 0)
	defer b.Release()
	if len(b.Entries) != 1 || b.Entries[0].Offset != 0 || b.Deliveries[0] != 2 {
		t.Fatalf("after the nack: %v %v, want offset 0 handed out a second time", offsets(b.Entries), b.Deliveries)
	}
}
