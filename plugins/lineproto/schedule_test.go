package lineproto

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/schedule"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// startScheduled runs a server whose PUBX deliver-at=/delay= go to a real
// scheduler over the registry (not started: the test moves due messages
// with MoveDue), its clock shift ahead of the real one.
func startScheduled(t *testing.T, shift *atomic.Int64, mod func(*schedule.Options)) (*testEnv, *schedule.Scheduler) {
	t.Helper()
	e := newEnv(t, Options{}, groups.Options{})
	o := schedule.Options{FS: vfs.OS{}, Dir: filepath.Join(t.TempDir(), schedule.Dir), Logger: zaptest.NewLogger(t),
		Now: func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }}
	if mod != nil {
		mod(&o)
	}
	s := schedule.New(o, schedule.RegistryTarget(e.reg))
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	e.srv.opts.Scheduler = schedule.NewIdempotent(s, time.Minute, 0)
	if err := e.srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e, s
}

// scheduledReply parses "OK SCHEDULED <id> <deliverAt>[ DUPLICATE]".
func scheduledReply(t *testing.T, line string) (id string, at time.Time, dup bool) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 4 || f[0] != "OK" || f[1] != "SCHEDULED" || len(f) > 5 || (len(f) == 5 && f[4] != "DUPLICATE") {
		t.Fatalf("reply %q; want OK SCHEDULED <id> <deliverAt> [DUPLICATE]", line)
	}
	at, err := time.Parse(time.RFC3339Nano, f[3])
	if err != nil || !strings.HasSuffix(f[3], "Z") {
		t.Fatalf("reply %q: deliverAt %v", line, err)
	}
	return f[2], at, len(f) == 5
}

// PUBX deliver-at= (RFC 3339 or Unix ms) and delay= schedule the message:
// answered OK SCHEDULED in the line's place (pipelined with ordinary
// PUBs), nothing in the topic until due; a retried id= is DUPLICATE with
// the first schedule; a due-now one is an ordinary publish; a ttl counts
// from the publish. When due, they enter the topic, and a direct publish
// of the same id is stored beside its scheduled twin.
func TestPubXScheduled(t *testing.T) {
	var shift atomic.Int64
	e, s := startScheduled(t, &shift, nil)
	c := e.dial(t)
	// A millisecond before the delay=1h below (counted from its publish's
	// millisecond): due first, whatever the clock's sub-milliseconds.
	soon := time.Now().Add(time.Hour - time.Millisecond).UTC().Truncate(time.Millisecond)
	// One write: the replies come back in line order.
	c.send(strings.Join([]string{
		`PUB ts DURABLE {"n":0}`,
		`PUBX ts DURABLE delay=1h {"n":1}`,
		`PUBX ts ACCEPTED deliver-at=` + soon.Format(time.RFC3339Nano) + ` id=evt%201 {"n":2}`,
		`PUBX ts DURABLE delay=0s {"n":3}`,
	}, "\n"))
	expectPrefix(t, c.read(), "OK 0 DURABLE")
	_, at1, dup := scheduledReply(t, c.read())
	if dup || time.Until(at1) < 59*time.Minute || time.Until(at1) > 61*time.Minute {
		t.Errorf("delay=1h: due %v", at1)
	}
	id2, at2, dup := scheduledReply(t, c.read())
	if dup || !at2.Equal(soon) {
		t.Errorf("deliver-at: due %v, want %v", at2, soon)
	}
	expectPrefix(t, c.read(), "OK 1 DURABLE")
	// The retry, with another due time: the first schedule.
	id, at, dup := scheduledReply(t, c.do(`PUBX ts DURABLE delay=2h id=evt%201 {"n":2}`))
	if !dup || id != id2 || !at.Equal(soon) {
		t.Errorf("retry: %s %v %v; want DUPLICATE of %s %v", id, at, dup, id2, soon)
	}
	later := time.Now().Add(2 * time.Hour).UnixMilli()
	if _, at, _ := scheduledReply(t, c.do(`PUBX ts DURABLE deliver-at=`+strconv.FormatInt(later, 10)+` ttl=3h {"n":4}`)); at.UnixMilli() != later {
		t.Errorf("deliver-at in Unix ms: due %v, want %d", at, later)
	}
	if s.Pending("ts") != 3 || strings.Join(e.contentsOf(t, "ts"), ",") != "0,3" {
		t.Fatalf("pending %d, topic %v; want 3 and 0,3", s.Pending("ts"), e.contentsOf(t, "ts"))
	}
	expectPrefix(t, c.do(`PUBX ts DURABLE id=evt%201 {"n":5}`), "OK 2 DURABLE")
	shift.Store(int64(2*time.Hour + time.Second))
	if n, _, err := s.MoveDue(context.Background()); err != nil || n != 3 {
		t.Fatalf("moved %d, %v", n, err)
	}
	if got := strings.Join(e.contentsOf(t, "ts"), ","); got != "0,3,5,2,1,4" { // in due order: 2 was due a moment before 1
		t.Errorf("topic %s; want 0,3,5,2,1,4", got)
	}
}

// The refusals of a scheduled PUBX: each answered ERR with its code in the
// line's place, nothing stored or scheduled, the connection open.
func TestPubXScheduleRefused(t *testing.T) {
	var shift atomic.Int64
	e, s := startScheduled(t, &shift, func(o *schedule.Options) { o.MaxDelay = 3 * time.Hour })
	c := e.dial(t)
	for _, x := range []struct{ line, want string }{
		{`PUBX ts DURABLE delay=1h deliver-at=2100-01-01T00:00:00Z {"n":9}`, "ERR BAD_REQUEST give deliver-at= or delay=, not both (deliver-at=: an RFC 3339 time"},
		{`PUBX ts DURABLE delay=1h delay=2h {"n":9}`, "ERR BAD_REQUEST attribute delay given twice"},
		{`PUBX ts DURABLE delay=soon {"n":9}`, `ERR BAD_REQUEST delay="soon" is not a duration (deliver-at=: an RFC 3339 time`},
		{`PUBX ts DURABLE delay= {"n":9}`, "ERR BAD_REQUEST attribute delay: the value is empty (deliver-at=: an RFC 3339 time"},
		{`PUBX ts DURABLE deliver-at=tomorrow {"n":9}`, `ERR BAD_REQUEST deliver-at="tomorrow" is not an RFC 3339 time (deliver-at=: an RFC 3339 time`},
		{`PUBX ts DURABLE deliver-at=99999999999999999999 {"n":9}`, "ERR BAD_REQUEST deliver-at=99999999999999999999 is not a non-negative integer of Unix milliseconds (deliver-at=: an RFC 3339 time (\"2026-12-04T10:00:00Z\") or Unix milliseconds, digits only"},
		{`PUBX ts DURABLE delay=-1s {"n":9}`, `ERR BAD_REQUEST delay="-1s" is negative (deliver-at=: an RFC 3339 time`},
		{`PUBX ts DURABLE delay=2h ttl=1h {"n":9}`, "ERR BAD_REQUEST the message would expire before it is due"},
		{`PUBX ts DURABLE delay=1h ttl=1h {"n":9}`, "ERR BAD_REQUEST the message would expire before it is due"},
		{`PUBX ts DURABLE deliver-at=2100-01-01T00:00:00Z ttl=1h {"n":9}`, "ERR BAD_REQUEST the message would expire before it is due"},
		{`PUBX ts DURABLE delay=4h {"n":9}`, "ERR BAD_REQUEST delay=4h0m0s is over the maximum delay of 3h0m0s (mmmq.broker.schedule.max-delay)"},
		{`PUBX ts DURABLE deliver-at=9999-12-31T23:59:59Z {"n":9}`, "ERR BAD_REQUEST deliver-at=9999-12-31T23:59:59.000Z is "},
		{`PUBX ts DURABLE delay=3h0m0.002s {"n":9}`, "ERR BAD_REQUEST delay=3h0m0.00"},
		{`PUBX ts DURABLE deliver-at=1796400000 {"n":9}`, "ERR BAD_REQUEST deliver-at= is in Unix milliseconds; 1796400000 looks like seconds"},
	} {
		reply := c.do(x.line)
		expectPrefix(t, reply, x.want)
		// The line protocol's own names, never the HTTP API's members.
		if strings.Contains(reply, "deliverAt") || strings.Contains(reply, "JSON integer") {
			t.Errorf("%s: reply %q names the HTTP members", x.line, reply)
		}
	}
	if n := s.PendingTotal(); n != 0 {
		t.Errorf("%d scheduled by refused lines", n)
	}
	if _, ok := e.reg.Get("ts"); ok {
		t.Errorf("a refused line created the topic")
	}
	expectPrefix(t, c.do(`PUBX ts DURABLE {"n":0}`), "OK 0 DURABLE")
}

// Without a scheduler (or where it cannot schedule, a backend other than
// local), a scheduled PUBX is ERR NOT_IMPLEMENTED, as over HTTP; a
// due-now one is still an ordinary publish.
func TestPubXScheduleNotImplemented(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	expectPrefix(t, c.do(`PUBX ts DURABLE delay=1h {"n":9}`), "ERR "+contract.CodeNotImplemented+" scheduled messages (\"deliverAt\", \"delay\") are not available: this broker has no scheduler module")
	expectPrefix(t, c.do(`PUBX ts DURABLE delay=0s {"n":0}`), "OK 0 DURABLE")

	var shift atomic.Int64
	e2, s := startScheduled(t, &shift, func(o *schedule.Options) { o.Unsupported = "the storage backend is not local" })
	c2 := e2.dial(t)
	expectPrefix(t, c2.do(`PUBX ts DURABLE delay=1h {"n":9}`), "ERR "+contract.CodeNotImplemented+" scheduled messages (deliverAt, delay) are not supported here: the storage backend is not local")
	if s.PendingTotal() != 0 {
		t.Errorf("scheduled where unsupported")
	}
}

// A PUBX delay of exactly max-delay is scheduled (its due time rounded up
// to the millisecond).
func TestPubXMaxDelayBoundary(t *testing.T) {
	var shift atomic.Int64
	e, s := startScheduled(t, &shift, func(o *schedule.Options) { o.MaxDelay = 3 * time.Hour })
	c := e.dial(t)
	scheduledReply(t, c.do(`PUBX ts DURABLE delay=3h {"n":1}`))
	if s.Pending("ts") != 1 {
		t.Errorf("pending %d", s.Pending("ts"))
	}
}

// A scheduled PUBX whose stored message fits max-record-bytes only
// without the schedule-id header the broker adds when it is due is ERR
// TOO_LARGE at once; nothing is scheduled, the connection stays open.
func TestPubXScheduledSizeCountsTheHeader(t *testing.T) {
	var shift atomic.Int64
	e, s := startScheduled(t, &shift, nil)
	max := e.srv.opts.MaxRecordBytes
	payload := func(n int) []byte { return []byte(`"` + strings.Repeat("x", n) + `"`) }
	stored, err := contract.AppendTTLMessage(nil, "ts", payload(0), "p-1", "", 0, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	n := max - 10 - len(stored) // stored: max-10 bytes
	c := e.dial(t)
	expectPrefix(t, c.do(`PUBX ts DURABLE delay=1h id=p-1 `+string(payload(n))), "ERR TOO_LARGE scheduled message is")
	if s.PendingTotal() != 0 {
		t.Errorf("scheduled %d", s.PendingTotal())
	}
	scheduledReply(t, c.do(`PUBX ts DURABLE delay=1h id=p-2 `+string(payload(n+10-contract.ScheduleHeaderMaxBytes))))
}
