package lineproto

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/topicqueue/topicqueuetest"
)

// startOnFaultyDisk is start on an in-memory filesystem whose topics keep
// one entry per segment file, with the read fault installed (off until
// failAt is set). n messages {"i":<offset>} are published to topic t.
func startOnFaultyDisk(t *testing.T, n int) (*testEnv, *topicqueuetest.ReadFault) {
	t.Helper()
	log := zaptest.NewLogger(t)
	f := topicqueuetest.NewReadFault(log)
	reg := f.Registry
	c := groups.New(reg, groups.Options{Logger: log})
	srv := New(Options{Addr: "127.0.0.1:0", Logger: log}, reg, c)
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(context.Background()); err != nil {
			t.Error(err)
		}
		_ = c.Stop(context.Background())
		if err := reg.Close(); err != nil {
			t.Error(err)
		}
	})
	e := &testEnv{reg: reg, c: c, srv: srv}
	cl := e.dial(t)
	for i := 0; i < n; i++ {
		expectPrefix(t, cl.do(fmt.Sprintf(`PUB t DURABLE {"i":%d}`, i)), fmt.Sprintf("OK %d DURABLE", i))
	}
	return e, f
}

// groupLines sends STATUS t and returns its GROUP lines.
func (c *client) groupLines() []string {
	c.t.Helper()
	c.send("STATUS t")
	var out []string
	for {
		l := c.read()
		switch {
		case strings.HasPrefix(l, "GROUP "):
			out = append(out, l)
		case strings.HasPrefix(l, "END "):
			return out
		case !strings.HasPrefix(l, "TOPIC "):
			c.t.Fatalf("STATUS reply line %q", l)
		}
	}
}

// A read error in FETCH is answered "ERR UNAVAILABLE" naming the I/O error,
// never with messages past it or an empty "END 0": the connection keeps
// the group at the unreadable offset (it cannot be acknowledged), and once
// reads work the next FETCH delivers it and the rest, in order.
func TestFetchReadErrorIsUnavailable(t *testing.T) {
	e, f := startOnFaultyDisk(t, 5)
	c := e.dial(t)
	f.FailAt.Store(2)
	if offs, _ := c.fetch("FETCH t g 10 0"); fmt.Sprint(offs) != "[0 1]" {
		t.Fatalf("fetch before the unreadable offset: %v, want [0 1]", offs)
	}
	for i := 0; i < 2; i++ {
		got := c.do("FETCH t g 10 0")
		if !strings.HasPrefix(got, "ERR UNAVAILABLE ") || !strings.Contains(got, "input/output error") {
			t.Fatalf("fetch at the unreadable offset: %q, want ERR UNAVAILABLE naming the I/O error", got)
		}
	}
	if f.Fired.Load() == 0 {
		t.Fatal("the read fault never fired")
	}
	expectPrefix(t, c.do("ACK t g 2"), "ERR NOT_DELIVERED ")
	if got := fmt.Sprint(c.groupLines()); got != "[GROUP t g committed=0 held=true]" {
		t.Fatalf("STATUS while offset 2 is unreadable: %s, want the group held at committed=0", got)
	}
	if got := c.do("ACK t g 1"); got != "ACKED 2" {
		t.Fatalf("ack 1: %q", got)
	}

	f.FailAt.Store(-1)
	if offs, _ := c.fetch("FETCH t g 10 0"); fmt.Sprint(offs) != "[2 3 4]" {
		t.Fatalf("fetch after the fault: %v, want [2 3 4]", offs)
	}
	if got := c.do("ACK t g 4"); got != "ACKED 5" {
		t.Fatalf("ack 4: %q", got)
	}
}

// A connection whose first FETCH of a group fails on a read error does not
// keep the group: another connection takes it once reads work and starts
// at the committed offset.
func TestFirstFetchReadErrorReleasesTheGroup(t *testing.T) {
	e, f := startOnFaultyDisk(t, 3)
	a := e.dial(t)
	f.FailAt.Store(0)
	expectPrefix(t, a.do("FETCH t g 10 0"), "ERR UNAVAILABLE ")
	if got := fmt.Sprint(a.groupLines()); got != "[GROUP t g committed=0 held=false]" {
		t.Fatalf("STATUS after the failed first fetch: %s, want the group free at committed=0", got)
	}
	f.FailAt.Store(-1)
	b := e.dial(t)
	if offs, _ := b.fetch("FETCH t g 10 0"); fmt.Sprint(offs) != "[0 1 2]" {
		t.Fatalf("another connection's fetch: %v, want [0 1 2]", offs)
	}
}
