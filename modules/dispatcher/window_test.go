package dispatcher

import (
	"testing"
	"time"
)

// TestBatchIntervalCommitPolicy: batches do not add commits to the
// interval policy. 25 messages in batches of 5, committed every 10: the
// start offset, then 10, 20 and 25 when idle, 4 commits, as without
// batches (TestIntervalCommitPolicy). The window holds exactly one batch
// (its capacity is the larger of the read batch, 4, and the batch, 5):
// when the answer came, the worker used to look for new messages before
// it removed the finished ones from the window, found it full, saw
// nothing to send and committed as if idle after every batch (6 commits).
func TestBatchIntervalCommitPolicy(t *testing.T) {
	c := newConsumer(t, nil)
	policy := CommitPolicy{Mode: Interval, Interval: time.Hour, MaxCount: 10}
	d := New("d", c.host(t), MustPattern("t")).WithCommitPolicy(policy).WithBatch(Batch{MaxMessages: 5})
	tp, m := deliverOne(t, "t", 25, testOptions(), d)
	waitCommitted(t, m, "d", "t", 25)
	if st := status(m, "d", "t"); st.Commits != 4 || st.Delivered != 25 {
		t.Errorf("status = %+v, want 4 commits, 25 delivered", st)
	}
	if n := len(c.requests()); n != 5 {
		t.Errorf("%d pushes, want 5 batches of 5", n)
	}
	wantCheckpoint(t, tp.dir, "d", 25)
}
