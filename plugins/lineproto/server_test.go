package lineproto

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/dedup"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/topicqueue/topicqueuetest"
)

type testEnv struct {
	reg *topicqueue.Registry
	c   *groups.Coordinator
	srv *Server
	// notified gets a value (at most one pending) each time a FETCH asks
	// a topic's log for a Notify channel, right before it blocks: see
	// waitingFetch.
	notified chan struct{}
}

// start runs a server over a fresh registry; each of with may change the
// storage options (e.g. a small segment size).
func start(t *testing.T, opts Options, gopts groups.Options, with ...func(*storage.Options)) *testEnv {
	t.Helper()
	e := newEnv(t, opts, gopts, with...)
	if err := e.srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

// newEnv is start without Start: the caller starts the server (serve with
// its own listener, e.g. a TLS one).
func newEnv(t *testing.T, opts Options, gopts groups.Options, with ...func(*storage.Options)) *testEnv {
	t.Helper()
	log := zaptest.NewLogger(t)
	// gopts.Budget, when set, is the storage's in-flight budget too.
	root := t.TempDir()
	sopts := storage.Options{Logger: log, MaxRecordBytes: 4096, Budget: gopts.Budget}
	for _, f := range with {
		f(&sopts)
	}
	local := &topicqueue.LocalBackend{Root: root, Storage: sopts}
	notified := make(chan struct{}, 1)
	reg := topicqueue.New(topicqueue.Options{
		Root:    root,
		Backend: &topicqueuetest.NotifyingBackend{Backend: local, Notified: notified},
		Dedup:   dedup.New(dedup.Options{Window: time.Minute, Logger: log}),
	})
	gopts.Logger = log
	c := groups.New(reg, gopts)
	opts.Addr = "127.0.0.1:0"
	if opts.Logger == nil {
		opts.Logger = log
	}
	if opts.MaxLineBytes == 0 {
		opts.MaxLineBytes = 1024
	}
	if opts.MaxRecordBytes == 0 {
		opts.MaxRecordBytes = 512
	}
	srv := New(opts, reg, c)
	t.Cleanup(func() {
		if err := srv.Stop(context.Background()); err != nil {
			t.Error(err)
		}
		_ = c.Stop(context.Background())
		if err := reg.Close(); err != nil {
			t.Error(err)
		}
	})
	return &testEnv{reg: reg, c: c, srv: srv, notified: notified}
}

// waitingFetch waits until a FETCH sent by the test is blocked waiting for
// its topic: it has taken its Notify channel, so a publish or a stop from
// now on ends its wait.
func (e *testEnv) waitingFetch() { <-e.notified }

type client struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func (e *testEnv) dial(t *testing.T) *client {
	t.Helper()
	nc, err := net.Dial("tcp", e.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func (c *client) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, line+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) read() string {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	l, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("read reply: %v (got %q)", err, l)
	}
	return strings.TrimSuffix(l, "\n")
}

// do sends line and reads one reply line.
func (c *client) do(line string) string {
	c.t.Helper()
	c.send(line)
	return c.read()
}

// fetch sends a FETCH and returns the MSG (or MSGX) lines' offsets and
// payloads, checking the END count.
func (c *client) fetch(line string) ([]int64, []string) {
	c.t.Helper()
	ms := c.fetchX(line)
	var offs []int64
	var payloads []string
	for _, m := range ms {
		offs = append(offs, m.off)
		payloads = append(payloads, m.payload)
	}
	return offs, payloads
}

// fetched is one MSG or MSGX line of a FETCH reply; deliveries is -1 for
// MSG.
type fetched struct {
	off        int64
	deliveries int
	payload    string
}

// fetchX sends a FETCH and returns its MSG and MSGX lines, checking the
// END count.
func (c *client) fetchX(line string) []fetched {
	c.t.Helper()
	c.send(line)
	var ms []fetched
	for {
		l := c.read()
		if strings.HasPrefix(l, "END ") {
			if want := fmt.Sprintf("END %d", len(ms)); l != want {
				c.t.Fatalf("%q after %d messages", l, len(ms))
			}
			return ms
		}
		m := fetched{deliveries: -1}
		var head string
		if strings.HasPrefix(l, "MSGX ") {
			if _, err := fmt.Sscanf(l, "MSGX %d deliveries=%d", &m.off, &m.deliveries); err != nil {
				c.t.Fatalf("fetch reply line %q", l)
			}
			head = fmt.Sprintf("MSGX %d deliveries=%d ", m.off, m.deliveries)
		} else {
			if _, err := fmt.Sscanf(l, "MSG %d", &m.off); err != nil {
				c.t.Fatalf("fetch reply line %q", l)
			}
			head = fmt.Sprintf("MSG %d ", m.off)
		}
		if !strings.HasPrefix(l, head) {
			c.t.Fatalf("fetch reply line %q, want prefix %q", l, head)
		}
		m.payload = l[len(head):]
		ms = append(ms, m)
	}
}

func expectPrefix(t *testing.T, got, prefix string) {
	t.Helper()
	if !strings.HasPrefix(got, prefix) {
		t.Fatalf("reply %q, want prefix %q", got, prefix)
	}
}

func TestPubEachLevel(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	if got := c.do(`PUB order.created ACCEPTED {"orderId":1}`); got != "OK - ACCEPTED" {
		t.Fatalf("ACCEPTED: %q", got)
	}
	if got := c.do(`PUB order.created WRITTEN {"orderId":2}`); got != "OK 1 WRITTEN" {
		t.Fatalf("WRITTEN: %q", got)
	}
	if got := c.do(`pub order.created durable  {"orderId": 3, "note": "a b"}`); got != "OK 2 DURABLE" {
		t.Fatalf("DURABLE: %q", got)
	}
	// The stored shape is the HTTP one (contract.EncodeMessage).
	offs, payloads := c.fetch("FETCH order.created g 10 1000")
	if fmt.Sprint(offs) != "[0 1 2]" {
		t.Fatalf("offsets %v", offs)
	}
	var m struct {
		Topic     struct{ Name string } `json:"topic"`
		Content   map[string]any        `json:"content"`
		ID        string                `json:"id"`
		Timestamp int64                 `json:"timestamp"`
	}
	if err := json.Unmarshal([]byte(payloads[2]), &m); err != nil {
		t.Fatal(err)
	}
	if m.Topic.Name != "order.created" || m.Content["orderId"].(float64) != 3 || m.Content["note"] != "a b" || m.ID == "" || m.Timestamp == 0 {
		t.Fatalf("stored message %s", payloads[2])
	}
	if !strings.HasPrefix(payloads[2], `{"topic":{"name":"order.created"},"content":{"orderId":3,"note":"a b"},"id":`) {
		t.Fatalf("stored message not in the encoder's shape: %s", payloads[2])
	}
}

func TestFetchAckStatus(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	for i := 0; i < 3; i++ {
		expectPrefix(t, c.do(fmt.Sprintf(`PUB t DURABLE {"i":%d}`, i)), fmt.Sprintf("OK %d DURABLE", i))
	}
	if offs, _ := c.fetch("FETCH t g 2 0"); fmt.Sprint(offs) != "[0 1]" {
		t.Fatalf("offsets %v", offs)
	}
	if got := c.do("ACK t g 1"); got != "ACKED 2" {
		t.Fatalf("ack: %q", got)
	}
	if got := c.do("ACK t g 0"); got != "ACKED 2" {
		t.Fatalf("ack below committed: %q", got)
	}
	expectPrefix(t, c.do("ACK t g 2"), "ERR NOT_DELIVERED ")
	if offs, _ := c.fetch("FETCH t g 10 0"); fmt.Sprint(offs) != "[2]" {
		t.Fatalf("offsets %v", offs)
	}
	start := time.Now()
	if offs, _ := c.fetch("FETCH t g 10 150"); len(offs) != 0 || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("empty fetch: %v after %s", offs, time.Since(start))
	}
	expectPrefix(t, c.do(`PUB u DURABLE null`), "OK 0 DURABLE")
	c.send("STATUS")
	want := []string{
		"TOPIC t next=3 segments=1 bytes=",
		"GROUP t g committed=2 held=true",
		"TOPIC u next=1 segments=1 bytes=",
		"END 2",
	}
	for _, w := range want {
		expectPrefix(t, c.read(), w)
	}
	c.send("STATUS u")
	expectPrefix(t, c.read(), "TOPIC u next=1 ")
	expectPrefix(t, c.read(), "END 1")
	expectPrefix(t, c.do("STATUS nosuch"), "ERR NOT_FOUND ")
	if c, _ := e.c.Committed("t", "g"); c != 2 {
		t.Fatalf("committed %d", c)
	}
}

func TestLongPollWakesOnPublish(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	p := e.dial(t)
	expectPrefix(t, p.do(`PUB t DURABLE 1`), "OK 0")
	c := e.dial(t)
	c.fetch("FETCH t g 10 0")
	c.send("FETCH t g 10 10000")
	e.waitingFetch()
	begin := time.Now()
	expectPrefix(t, p.do(`PUB t DURABLE 2`), "OK 1")
	expectPrefix(t, c.read(), "MSG 1 ")
	expectPrefix(t, c.read(), "END 1")
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("woke after %s", d)
	}
}

func TestErrorCodes(t *testing.T) {
	e := start(t, Options{}, groups.Options{Reserved: func(n string) bool { return n == "disp" }})
	c := e.dial(t)
	expectPrefix(t, c.do(`PUB t DURABLE {}`), "OK 0")
	for _, tc := range []struct{ line, prefix string }{
		{"HELLO world", "ERR BAD_REQUEST "},
		{"\x00\x01garbage", "ERR BAD_REQUEST "},
		{"", "ERR BAD_REQUEST "},
		{"PUB t DURABLE", "ERR BAD_REQUEST "},
		{"PUB t SOMETIMES {}", "ERR BAD_REQUEST "},
		{"PUB bad..topic DURABLE {}", "ERR BAD_REQUEST "},
		{"PUB t DURABLE {not json", "ERR BAD_REQUEST "},
		{`PUB t DURABLE "` + strings.Repeat("x", 600) + `"`, "ERR TOO_LARGE "},
		{"PUBID t DURABLE id", "ERR BAD_REQUEST "},
		{"PUBID t SOMETIMES id {}", "ERR BAD_REQUEST "},
		{"PUBID bad..topic DURABLE id {}", "ERR BAD_REQUEST "},
		{"PUBID t DURABLE id {not json", "ERR BAD_REQUEST "},
		{`PUBID t DURABLE id "` + strings.Repeat("x", 600) + `"`, "ERR TOO_LARGE "},
		{"FETCH t g", "ERR BAD_REQUEST "},
		{"FETCH t g 0 0", "ERR BAD_REQUEST "},
		{"FETCH t g 1 -1", "ERR BAD_REQUEST "},
		{"FETCH t .g 1 0", "ERR BAD_REQUEST "},
		{"FETCH nosuch g 1 0", "ERR NOT_FOUND "},
		{"FETCH t disp 1 0", "ERR NAME_TAKEN "},
		{"ACK t g x", "ERR BAD_REQUEST "},
		{"ACK t g 0", "ERR NOT_DELIVERED "},
		{"STATUS a b", "ERR BAD_REQUEST "},
	} {
		if got := c.do(tc.line); !strings.HasPrefix(got, tc.prefix) {
			t.Errorf("%q: reply %q, want prefix %q", tc.line, got, tc.prefix)
		}
	}
	// Still usable after every error above; nothing was created.
	if _, ok := e.reg.Get("nosuch"); ok {
		t.Fatal("FETCH created a topic")
	}
	expectPrefix(t, c.do(`PUB t DURABLE {}`), "OK 1")
	// An over-long line: ERR TOO_LARGE, then the server closes.
	c.send(strings.Repeat("A", 5000))
	expectPrefix(t, c.read(), "ERR TOO_LARGE ")
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, err := c.r.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("after TOO_LARGE: %q, %v; want EOF", l, err)
	}
}

func TestOverlongLineWithoutNewline(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	// Never a newline: the server must stop reading at the limit.
	if _, err := c.nc.Write([]byte(strings.Repeat("B", 3000))); err != nil {
		t.Fatal(err)
	}
	expectPrefix(t, c.read(), "ERR TOO_LARGE ")
}

func TestGroupBusyAndRedeliveryOnDisconnect(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c1 := e.dial(t)
	for i := 0; i < 5; i++ {
		c1.do(fmt.Sprintf(`PUB t DURABLE {"i":%d}`, i))
	}
	if offs, _ := c1.fetch("FETCH t g 5 0"); fmt.Sprint(offs) != "[0 1 2 3 4]" {
		t.Fatalf("offsets %v", offs)
	}
	if got := c1.do("ACK t g 2"); got != "ACKED 3" {
		t.Fatalf("ack: %q", got)
	}
	c2 := e.dial(t)
	expectPrefix(t, c2.do("FETCH t g 10 0"), "ERR GROUP_BUSY ")
	c1.nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c2.send("FETCH t g 10 0")
		l := c2.read()
		if strings.HasPrefix(l, "ERR GROUP_BUSY") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // the server notices the close asynchronously
			continue
		}
		expectPrefix(t, l, "MSG 3 ")
		expectPrefix(t, c2.read(), "MSG 4 ")
		expectPrefix(t, c2.read(), "END 2")
		break
	}
}

func TestLeaseExpiredOnConnection(t *testing.T) {
	e := start(t, Options{}, groups.Options{LeaseTimeout: 50 * time.Millisecond})
	c := e.dial(t)
	c.do(`PUB t DURABLE 1`)
	c.fetch("FETCH t g 1 0")
	time.Sleep(120 * time.Millisecond)
	expectPrefix(t, c.do("ACK t g 0"), "ERR SESSION_EXPIRED ")
	// The next FETCH starts a new session from the committed offset.
	if offs, _ := c.fetch("FETCH t g 1 0"); fmt.Sprint(offs) != "[0]" {
		t.Fatalf("offsets %v", offs)
	}
	if got := c.do("ACK t g 0"); got != "ACKED 1" {
		t.Fatalf("ack: %q", got)
	}
}

func TestMaxConns(t *testing.T) {
	e := start(t, Options{MaxConns: 1}, groups.Options{})
	c1 := e.dial(t)
	expectPrefix(t, c1.do("STATUS"), "END 0")
	c2 := e.dial(t)
	expectPrefix(t, c2.read(), "ERR UNAVAILABLE ")
	expectPrefix(t, c1.do("STATUS"), "END 0")
}

func TestStopEndsConnectionsAndWaits(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	idle := e.dial(t)
	expectPrefix(t, idle.do("STATUS"), "END 0")
	waiting := e.dial(t)
	waiting.do(`PUB t DURABLE 1`)
	waiting.fetch("FETCH t g 10 0")
	waiting.send("FETCH t g 10 30000")
	e.waitingFetch()
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("stop took %s", d)
	}
	expectPrefix(t, waiting.read(), "ERR UNAVAILABLE ")
	for _, c := range []*client{idle, waiting} {
		_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.r.ReadString('\n'); !errors.Is(err, io.EOF) {
			t.Fatalf("after stop: %v, want EOF", err)
		}
	}
	// The group was released on close.
	if _, err := e.c.Acquire("t", "g"); err != nil {
		t.Fatalf("group still held after stop: %v", err)
	}
	if _, err := net.DialTimeout("tcp", e.srv.Addr(), time.Second); err == nil {
		t.Fatal("listener still open")
	}
}

// httpPublish publishes body through the HTTP API over e's registry and
// fails the test unless it is acknowledged (200).
func httpPublish(t *testing.T, e *testEnv, body string) {
	t.Helper()
	h := httptest.NewServer(httpapi.New(httpapi.Options{}, e.reg, nil, zaptest.NewLogger(t)).Handler())
	defer h.Close()
	resp, err := http.Post(h.URL+"/messages", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("http publish: %d", resp.StatusCode)
	}
}

func TestPubStoresSameShapeAsHTTP(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	httpPublish(t, e, `{"topic":"same","content":{ "a" : [1, 2], "s": "x y" }}`)
	c := e.dial(t)
	expectPrefix(t, c.do(`PUB same DURABLE { "a" : [1, 2], "s": "x y" }`), "OK 1 DURABLE")
	_, payloads := c.fetch("FETCH same g 2 0")
	strip := func(s string) string { // drop the per-message id and timestamp
		return regexp.MustCompile(`"id":"[^"]*","timestamp":\d+`).ReplaceAllString(s, "")
	}
	if len(payloads) != 2 || strip(payloads[0]) != strip(payloads[1]) {
		t.Fatalf("HTTP and PUB stored different shapes:\n%v", payloads)
	}
}

// TestAutoMaxConns: an eighth of the open-file limit, between 16 and
// DefaultMaxConns; DefaultMaxConns when the limit is unknown.
func TestAutoMaxConns(t *testing.T) {
	for limit, want := range map[uint64]int{0: DefaultMaxConns, 40: 16, 256: 32, 4096: 512, 20000: DefaultMaxConns} {
		if got := AutoMaxConns(limit); got != want {
			t.Errorf("AutoMaxConns(%d) = %d, want %d", limit, got, want)
		}
	}
}

// FETCH returns each message with the ordering key it was published with
// (over HTTP: PUB has no key), in its stored JSON.
func TestFetchReturnsTheKey(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	httpPublish(t, e, `{"topic":"keyed","content":1,"key":"customer 7/é"}`)
	c := e.dial(t)
	expectPrefix(t, c.do(`PUB keyed DURABLE 2`), "OK 1 DURABLE")
	_, payloads := c.fetch("FETCH keyed g 2 0")
	var keys []*string
	for _, p := range payloads {
		var m struct {
			Key *string `json:"key"`
		}
		if err := json.Unmarshal([]byte(p), &m); err != nil {
			t.Fatalf("MSG payload %s: %v", p, err)
		}
		keys = append(keys, m.Key)
	}
	if len(keys) != 2 || keys[0] == nil || *keys[0] != "customer 7/é" || keys[1] != nil {
		t.Fatalf("FETCH payloads %q, want the first with key \"customer 7/é\", the second without", payloads)
	}
}
