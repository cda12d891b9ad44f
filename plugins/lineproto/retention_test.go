package lineproto

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/storage"
)

// TestFetchAfterRetention: once retention has deleted the head of a topic,
// STATUS shows the new start offset and the incarnation id, FETCH with
// from= below the start answers ERR OFFSET_EXPIRED naming where the log
// starts now (and leaves the group free), and a plain FETCH of a group that
// never committed continues from the start offset.
func TestFetchAfterRetention(t *testing.T) {
	e := start(t, Options{}, groups.Options{}, func(o *storage.Options) { o.SegmentMaxBytes = 512 })
	c := e.dial(t)
	for i := 0; i < 30; i++ {
		expectPrefix(t, c.do(fmt.Sprintf(`PUB t DURABLE {"n":%d}`, i)), fmt.Sprintf("OK %d DURABLE", i))
	}
	q, _ := e.reg.Get("t")
	l := q.Log().(interface{ Unwrap() contract.Log }).Unwrap().(*storage.Log)
	res, err := l.ApplyRetention(contract.RetentionPolicy{MaxBytes: 1}, time.Now(), contract.KeepAll)
	if err != nil || res.StartOffset == 0 || res.StartOffset >= 30 {
		t.Fatalf("retention: %+v %v", res, err)
	}
	startOff := res.StartOffset

	status := c.do("STATUS t")
	m := regexp.MustCompile(`^TOPIC t next=30 segments=\d+ bytes=\d+ start=(\d+) incarnation=([0-9a-f]+)$`).FindStringSubmatch(status)
	if m == nil || m[1] != strconv.FormatInt(startOff, 10) || m[2] != q.Incarnation() {
		t.Fatalf("STATUS: %q, want start=%d incarnation=%s", status, startOff, q.Incarnation())
	}
	expectPrefix(t, c.read(), "END 1")

	got := c.do("FETCH t g 5 0 from=0")
	expectPrefix(t, got, "ERR OFFSET_EXPIRED ")
	if !regexp.MustCompile(fmt.Sprintf(`\b%d\b`, startOff)).MatchString(got) {
		t.Fatalf("%q does not name the start offset %d", got, startOff)
	}
	// The failed first FETCH did not keep the group: another connection takes it.
	other := e.dial(t)
	offs, _ := other.fetch("FETCH t g 2 0")
	if fmt.Sprint(offs) != fmt.Sprint([]int64{startOff, startOff + 1}) {
		t.Fatalf("plain FETCH after retention: %v, want from %d", offs, startOff)
	}
	// from= at the start offset, within what was delivered, is a resend.
	if offs, _ := other.fetch(fmt.Sprintf("FETCH t g 1 0 from=%d", startOff)); fmt.Sprint(offs) != fmt.Sprint([]int64{startOff}) {
		t.Fatalf("FETCH from=%d: %v", startOff, offs)
	}
	for _, bad := range []string{"FETCH t g 1 0 from=-1", "FETCH t g 1 0 from=x", "FETCH t g 1 0 to=3", "FETCH t g 1 0 from=1 x"} {
		expectPrefix(t, other.do(bad), "ERR BAD_REQUEST ")
	}
}
