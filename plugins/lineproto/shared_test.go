package lineproto

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/groups"
)

// publishN publishes n messages {"n":i} to topic durably.
func publishN(t *testing.T, c *client, topic string, n int) {
	t.Helper()
	for i := range n {
		expectPrefix(t, c.do(fmt.Sprintf(`PUB %s DURABLE {"n":%d}`, topic, i)), "OK ")
	}
}

func offsetsOf(ms []fetched) []int64 {
	var offs []int64
	for _, m := range ms {
		offs = append(offs, m.off)
	}
	return offs
}

// Two connections fetching a shared group get disjoint messages, each
// as MSGX with its delivery count 1; together they get every message.
func TestSharedFetchDisjoint(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	a, b := e.dial(t), e.dial(t)
	publishN(t, a, "t", 6)
	ma := a.fetchX("FETCH t g 3 0 mode=shared")
	mb := b.fetchX("fetch t g 10 0 mode=shared")
	if len(ma) != 3 || len(mb) != 3 {
		t.Fatalf("a got %v, b got %v; want 3 each", offsetsOf(ma), offsetsOf(mb))
	}
	all := append(offsetsOf(ma), offsetsOf(mb)...)
	slices.Sort(all)
	if !slices.Equal(all, []int64{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("together %v, want 0..5 once each", all)
	}
	for _, m := range append(ma, mb...) {
		if m.deliveries != 1 || !strings.Contains(m.payload, fmt.Sprintf(`"content":{"n":%d}`, m.off)) {
			t.Fatalf("message %+v: want deliveries=1 and its own content", m)
		}
	}
	// A third session finds nothing left; one without mode= joins the
	// shared group as it is.
	c := e.dial(t)
	if ms := c.fetchX("FETCH t g 10 0"); len(ms) != 0 {
		t.Fatalf("a third session got %v while everything is leased", offsetsOf(ms))
	}
	if got := fmt.Sprint(c.groupLines()); got != "[GROUP t g committed=0 held=true mode=shared sessions=3 in-flight=6]" {
		t.Fatalf("STATUS of a shared group: %s", got)
	}
}

// ACKX finishes messages (the committed offset moves over the finished
// prefix; a repeat counts as already); NACKX gives them back and another
// session gets them with their delivery count raised; a FETCH without
// mode= of a shared group gets MSG lines; an offset not leased to the
// connection is ERR NOT_DELIVERED and acknowledges nothing.
func TestSharedAckXNackX(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	a, b := e.dial(t), e.dial(t)
	publishN(t, a, "t", 4)
	if got := offsetsOf(a.fetchX("FETCH t g 3 0 mode=shared")); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("a got %v", got)
	}
	if got := a.do("ACKX t g offsets=0,2"); got != "ACKED 1 acked=2 already=0" {
		t.Fatalf("ACKX 0,2: %q", got)
	}
	if got := a.do("ackx t g offsets=0,0"); got != "ACKED 1 acked=0 already=1" {
		t.Fatalf("ACKX of a finished offset: %q", got)
	}
	expectPrefix(t, a.do("ACKX t g offsets=1,3"), "ERR NOT_DELIVERED ")
	if got := a.do("NACKX t g offsets=1,1"); got != "NACKED 1 nacked=1 already=0" {
		t.Fatalf("NACKX 1,1: %q", got)
	}
	mb := b.fetchX("FETCH t g 10 0 mode=shared")
	if len(mb) != 2 || mb[0].off != 1 || mb[0].deliveries != 2 || mb[1].off != 3 || mb[1].deliveries != 1 {
		t.Fatalf("b got %+v, want 1 (deliveries=2) and 3 (deliveries=1)", mb)
	}
	expectPrefix(t, a.do("ACKX t g offsets=1"), "ERR NOT_DELIVERED ") // leased to b now
	if got := b.do("ACKX t g offsets=1,3"); got != "ACKED 4 acked=2 already=0" {
		t.Fatalf("b ACKX 1,3: %q", got)
	}
	if got := b.do("NACKX t g offsets=3"); got != "NACKED 4 nacked=0 already=1" {
		t.Fatalf("NACKX of a finished offset: %q", got)
	}

	// retry-after: not handed out before it; MSG without mode=.
	expectPrefix(t, a.do(`PUB t DURABLE {"n":4}`), "OK 4 ")
	if got := offsetsOf(a.fetchX("FETCH t g 10 0")); !slices.Equal(got, []int64{4}) {
		t.Fatalf("a got %v, want [4]", got)
	}
	if got := a.do("NACKX t g retry-after=0.3 offsets=4"); got != "NACKED 4 nacked=1 already=0" {
		t.Fatalf("NACKX with retry-after: %q", got)
	}
	if ms := b.fetchX("FETCH t g 10 0"); len(ms) != 0 {
		t.Fatalf("b got %v before the retry-after", offsetsOf(ms))
	}
	begin := time.Now()
	ms := b.fetchX("FETCH t g 10 5000")
	if len(ms) != 1 || ms[0].off != 4 || ms[0].deliveries != -1 {
		t.Fatalf("b got %+v after the retry-after, want MSG 4", ms)
	}
	if d := time.Since(begin); d > 4*time.Second {
		t.Fatalf("the nacked message came after %s", d)
	}

	// Closing a connection gives its leased messages back.
	expectPrefix(t, a.do(`PUB t DURABLE {"n":5}`), "OK 5 ")
	if got := offsetsOf(a.fetchX("FETCH t g 10 0")); !slices.Equal(got, []int64{5}) {
		t.Fatalf("a got %v, want [5]", got)
	}
	a.nc.Close()
	ms = b.fetchX("FETCH t g 10 5000 mode=shared")
	if len(ms) != 1 || ms[0].off != 5 || ms[0].deliveries != 2 {
		t.Fatalf("after a closed, b got %+v, want 5 with deliveries=2", ms)
	}
}

// A group's mode is fixed by its first use: the other mode is ERR
// GROUP_MODE on FETCH (another connection's, or this one's), ACK of a
// shared group and ACKX or NACKX of an exclusive one too.
func TestSharedModeMismatch(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	a, b := e.dial(t), e.dial(t)
	publishN(t, a, "t", 2)
	a.fetchX("FETCH t s 1 0 mode=shared")
	expectPrefix(t, b.do("FETCH t s 1 0 mode=exclusive"), "ERR GROUP_MODE ")
	expectPrefix(t, a.do("FETCH t s 1 0 mode=exclusive"), "ERR GROUP_MODE ")
	expectPrefix(t, a.do("ACK t s 0"), "ERR GROUP_MODE ")
	expectPrefix(t, a.do("FETCH t s 1 0 from=0"), "ERR GROUP_MODE ")
	if got := a.do("ACKX t s offsets=0"); got != "ACKED 1 acked=1 already=0" {
		t.Fatalf("the session still works: %q", got)
	}

	b.fetchX("FETCH t x 1 0") // exclusive: the default
	expectPrefix(t, b.do("ACKX t x offsets=0"), "ERR GROUP_MODE ")
	expectPrefix(t, b.do("NACKX t x offsets=0"), "ERR GROUP_MODE ")
	expectPrefix(t, b.do("FETCH t x 1 0 mode=shared"), "ERR GROUP_MODE ")
	c := e.dial(t)
	expectPrefix(t, c.do("FETCH t x 1 0 mode=shared"), "ERR GROUP_MODE ")
	if got := b.do("ACK t x 0"); got != "ACKED 1" {
		t.Fatalf("the exclusive session still works: %q", got)
	}
	b.fetchX("FETCH t x 1 0 mode=exclusive")
}

// Malformed FETCH attributes and ACKX/NACKX lists are ERR BAD_REQUEST and
// change nothing; ACKX of a group the connection never fetched is ERR
// NOT_DELIVERED.
func TestSharedBadLines(t *testing.T) {
	e := start(t, Options{MaxLineBytes: 1 << 20}, groups.Options{})
	c := e.dial(t)
	publishN(t, c, "t", 2)
	expectPrefix(t, c.do("ACKX t g offsets=0"), "ERR NOT_DELIVERED ")
	c.fetchX("FETCH t g 10 0 mode=shared")
	long := strings.Repeat("0,", MaxOffsetsPerLine) + "1"
	for _, tc := range []struct{ line, want string }{
		{"FETCH t g 1 0 mode=both", "ERR BAD_REQUEST mode= must be shared or exclusive"},
		{"FETCH t g 1 0 mode=shared mode=shared", "ERR BAD_REQUEST mode= must be shared or exclusive, given once"},
		{"FETCH t g 1 0 from=x", "ERR BAD_REQUEST from=<offset> must be an integer >= 0"},
		{"FETCH t g 1 0 color=red", `ERR BAD_REQUEST unknown attribute "color"`},
		{"FETCH t g 1 0 shared", `ERR BAD_REQUEST "shared" is not an attribute`},
		{"FETCH t g 1 0 from=0 mode=shared x=1", "ERR BAD_REQUEST usage: FETCH"},
		{"ACKX t g", "ERR BAD_REQUEST too few arguments; usage: ACKX"},
		{"ACKX t g 0", `ERR BAD_REQUEST "0" is not an attribute`},
		{"ACKX t g offsets=", "ERR BAD_REQUEST offsets= is empty"},
		{"ACKX t g offsets=0,,1", `ERR BAD_REQUEST offsets=: "" is not an offset`},
		{"ACKX t g offsets=0,", `ERR BAD_REQUEST offsets=: "" is not an offset`},
		{"ACKX t g offsets=-1", `ERR BAD_REQUEST offsets=: "-1" is not an offset`},
		{"ACKX t g offsets=+1", `ERR BAD_REQUEST offsets=: "+1" is not an offset`},
		{"ACKX t g offsets=a", `ERR BAD_REQUEST offsets=: "a" is not an offset`},
		{"ACKX t g offsets=99999999999999999999", `ERR BAD_REQUEST offsets=: "99999999999999999999" is not an offset`},
		{"ACKX t g offsets=0 offsets=1", "ERR BAD_REQUEST attribute offsets given twice"},
		{"ACKX t g offsets=0 retry-after=1", `ERR BAD_REQUEST unknown attribute "retry-after" (ACKX knows offsets)`},
		{"ACKX t g offsets=%zz", "ERR BAD_REQUEST attribute offsets: the value is not percent-encoded"},
		{"ACKX t g offsets=" + long, fmt.Sprintf("ERR BAD_REQUEST offsets= has %d offsets, over %d per line", MaxOffsetsPerLine+1, MaxOffsetsPerLine)},
		{"NACKX t g retry-after=1s", "ERR BAD_REQUEST offsets= is required"},
		{"NACKX t g offsets=0 retry-after=soon", "ERR BAD_REQUEST retry-after=soon: want a duration"},
		{"NACKX t g offsets=0 retry-after=-1s", "ERR BAD_REQUEST retry-after=-1s: want a duration"},
		{"NACKX t g offsets=0 retry-after=90000", "ERR BAD_REQUEST retry-after=90000: want a duration"},
		{"NACKX t g offsets=0 retry-after=1 retry-after=2", "ERR BAD_REQUEST attribute retry-after given twice"},
		{"ACKX t..x g offsets=0", "ERR NOT_DELIVERED "},
	} {
		expectPrefix(t, c.do(tc.line), tc.want)
	}
	// Percent-encoded commas are commas; nothing above acknowledged
	// anything.
	if got := c.do("ACKX t g offsets=0%2C1"); got != "ACKED 2 acked=2 already=0" {
		t.Fatalf("ACKX 0,1 after the refused lines: %q", got)
	}
	// The most offsets a line takes are accepted.
	if got := c.do("ACKX t g offsets=" + strings.Repeat("0,", MaxOffsetsPerLine-1) + "1"); got != "ACKED 2 acked=0 already=2" {
		t.Fatalf("ACKX of %d offsets: %q", MaxOffsetsPerLine, got)
	}
}

// A message with an ordering key is not handed out while an earlier one
// of its key is leased: the second session gets it only after the first
// is acknowledged; messages of other keys or without one go on.
func TestSharedKeyWaitsForItsHead(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	a, b := e.dial(t), e.dial(t)
	expectPrefix(t, a.do(`PUBX t DURABLE key=k {"n":0}`), "OK 0 ")
	expectPrefix(t, a.do(`PUBX t DURABLE key=k {"n":1}`), "OK 1 ")
	expectPrefix(t, a.do(`PUB t DURABLE {"n":2}`), "OK 2 ")
	expectPrefix(t, a.do(`PUBX t DURABLE key=other {"n":3}`), "OK 3 ")
	if got := offsetsOf(a.fetchX("FETCH t g 1 0 mode=shared")); !slices.Equal(got, []int64{0}) {
		t.Fatalf("a got %v, want [0]", got)
	}
	if got := offsetsOf(b.fetchX("FETCH t g 10 0 mode=shared")); !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("b got %v while 0 of key k is leased, want [2 3]", got)
	}
	if ms := b.fetchX("FETCH t g 10 0 mode=shared"); len(ms) != 0 {
		t.Fatalf("b got %v while 0 of key k is leased", offsetsOf(ms))
	}
	// A nack does not let the next one of the key pass either.
	if got := a.do("NACKX t g offsets=0 retry-after=30s"); got != "NACKED 0 nacked=1 already=0" {
		t.Fatalf("NACKX: %q", got)
	}
	if ms := b.fetchX("FETCH t g 10 0 mode=shared"); len(ms) != 0 {
		t.Fatalf("b got %v while 0 of key k waits for its retry", offsetsOf(ms))
	}
	e2 := start(t, Options{}, groups.Options{})
	a, b = e2.dial(t), e2.dial(t)
	expectPrefix(t, a.do(`PUBX t DURABLE key=k {"n":0}`), "OK 0 ")
	expectPrefix(t, a.do(`PUBX t DURABLE key=k {"n":1}`), "OK 1 ")
	a.fetchX("FETCH t g 10 0 mode=shared")
	if ms := b.fetchX("FETCH t g 10 0 mode=shared"); len(ms) != 0 {
		t.Fatalf("b got %v while 0 of key k is leased", offsetsOf(ms))
	}
	if got := a.do("ACKX t g offsets=0"); got != "ACKED 1 acked=1 already=0" {
		t.Fatalf("ACKX 0: %q", got)
	}
	ms := b.fetchX("FETCH t g 10 0 mode=shared")
	if len(ms) != 1 || ms[0].off != 1 || !strings.Contains(ms[0].payload, `"key":"k"`) {
		t.Fatalf("b got %+v after 0 was acknowledged, want 1 of key k", ms)
	}
}
