package lineproto

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// contentsOf reads topic back from its first offset: the "n" member of
// each stored message's content, in offset order.
func (e *testEnv) contentsOf(t *testing.T, topic string) []string {
	t.Helper()
	q, ok := e.reg.Get(topic)
	if !ok {
		t.Fatalf("topic %s does not exist", topic)
	}
	var out []string
	for from := q.StartOffset(); from < q.HighWatermark(); {
		es, err := q.ReadBatch(from, 1000)
		if err != nil || len(es) == 0 {
			t.Fatalf("read %s from %d: %d entries, %v", topic, from, len(es), err)
		}
		for _, en := range es {
			var m struct {
				Content struct{ N int } `json:"content"`
			}
			if err := json.Unmarshal(en.Payload, &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(m.Content.N))
		}
		from = es[len(es)-1].Offset + 1
	}
	return out
}

// readN reads n reply lines.
func (c *client) readN(n int) []string {
	c.t.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = c.read()
	}
	return out
}

// pipeLine is one line of TestPipelineRepliesInOrder and its expected
// reply: exactly want, or a line starting with prefix.
type pipeLine struct{ line, want, prefix string }

// pipelineScript returns n lines cycling through every kind of PUB and
// PUBID (each level, valid and refused, a duplicate of an id sent a line
// earlier) and an unknown command (a barrier), with the expected replies;
// the offsets follow from the line order alone. stored[topic] lists the
// contents stored, in order.
func pipelineScript(n int) (lines []pipeLine, stored map[string][]string) {
	next := map[string]int{}
	stored = map[string][]string{}
	ok := func(topic, level string, k int) string {
		off := next[topic]
		next[topic]++
		stored[topic] = append(stored[topic], fmt.Sprint(k))
		if level == "ACCEPTED" {
			return "OK - ACCEPTED"
		}
		return fmt.Sprintf("OK %d %s", off, level)
	}
	lastID, lastOff := "", 0
	for k := range n {
		var l pipeLine
		switch k % 12 {
		case 0:
			l = pipeLine{line: fmt.Sprintf(`PUB t DURABLE {"n":%d}`, k), want: ok("t", "DURABLE", k)}
		case 1:
			l = pipeLine{line: fmt.Sprintf(`PUB u WRITTEN {"n":%d}`, k), want: ok("u", "WRITTEN", k)}
		case 2:
			l = pipeLine{line: fmt.Sprintf(`pub t accepted {"n":%d}`, k), want: ok("t", "ACCEPTED", k)}
		case 3:
			l = pipeLine{line: fmt.Sprintf(`PUB v DURABLE {"n":%d}`, k), prefix: "ERR FORBIDDEN publish v "}
		case 4:
			l = pipeLine{line: fmt.Sprintf(`PUB t DURABLE {"n":%d`, k), prefix: "ERR BAD_REQUEST payload is not valid JSON"}
		case 5:
			lastID, lastOff = fmt.Sprintf("id-%d", k), next["t"]
			l = pipeLine{line: fmt.Sprintf(`PUBID t DURABLE %s {"n":%d}`, lastID, k), want: ok("t", "DURABLE", k)}
		case 6:
			l = pipeLine{line: fmt.Sprintf(`PUBID t DURABLE %s {"n":%d}`, lastID, k), want: fmt.Sprintf("OK %d DURABLE DUPLICATE", lastOff)}
		case 7:
			l = pipeLine{line: fmt.Sprintf(`PUB t SOMETIMES {"n":%d}`, k), prefix: "ERR BAD_REQUEST unknown ack level"}
		case 8:
			l = pipeLine{line: fmt.Sprintf(`PUB t/x DURABLE {"n":%d}`, k), prefix: "ERR BAD_REQUEST topic name"}
		case 9:
			l = pipeLine{line: fmt.Sprintf(`PUB t DURABLE {"n":%d,"pad":"%s"}`, k, strings.Repeat("x", 600)), prefix: "ERR TOO_LARGE payload of "}
		case 10:
			l = pipeLine{line: "NOPE", prefix: "ERR BAD_REQUEST unknown command"}
		case 11:
			l = pipeLine{line: fmt.Sprintf(`PUB t WRITTEN {"n":%d}`, k), want: ok("t", "WRITTEN", k)}
		}
		lines = append(lines, l)
	}
	return lines, stored
}

// TestPipelineRepliesInOrder: more lines than max-pipeline in one write,
// PUB and PUBID at every level mixed with refused lines (bad JSON, level,
// topic name, too large, a topic the principal may not publish to, an
// unknown command) and a duplicate of the line before: every reply comes
// in line order, the offsets follow the line order per topic, the errors
// are at their lines, and the topics hold the messages in line order.
func TestPipelineRepliesInOrder(t *testing.T) {
	const tok = "tok-PIPE-4b1d9e7a2c"
	for _, depth := range []int{1, 8, 128} {
		t.Run(fmt.Sprintf("max-pipeline=%d", depth), func(t *testing.T) {
			fa := &fakeAuth{tokens: map[string]contract.Principal{tok: &fakePrincipal{"pipe", []grant{
				{contract.ActionPublish, "t", ""}, {contract.ActionPublish, "u", ""},
			}}}}
			e := start(t, Options{MaxPipeline: depth, Authenticator: fa}, groups.Options{})
			c := e.dial(t)
			c.auth(tok)
			lines, stored := pipelineScript(100)
			var burst bytes.Buffer
			for _, l := range lines {
				burst.WriteString(l.line + "\n")
			}
			if _, err := c.nc.Write(burst.Bytes()); err != nil {
				t.Fatal(err)
			}
			for i, got := range c.readN(len(lines)) {
				l := lines[i]
				if (l.want != "" && got != l.want) || !strings.HasPrefix(got, l.prefix) {
					t.Fatalf("line %d %.60q: reply %q, want %q%q", i, l.line, got, l.want, l.prefix)
				}
			}
			for _, topic := range []string{"t", "u"} {
				// The last ACCEPTED and WRITTEN ones may not be durable yet.
				waitFor(t, "every message durable", func() bool { return e.topicLen(topic) == int64(len(stored[topic])) })
				if got, want := strings.Join(e.contentsOf(t, topic), ","), strings.Join(stored[topic], ","); got != want {
					t.Fatalf("topic %s holds %s, want %s", topic, got, want)
				}
			}
			if _, ok := e.reg.Get("v"); ok {
				t.Fatal("the forbidden PUB created topic v")
			}
		})
	}
}

// TestPipelineBarrier: STATUS, FETCH and ACK wait for the PUBs sent before
// them: STATUS sees them, FETCH delivers them, and a PUB after them is
// answered after their replies.
func TestPipelineBarrier(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	script := []string{
		`PUB b DURABLE {"n":0}`, `PUB b DURABLE {"n":1}`, "STATUS b", "FETCH b g 10 0",
		`PUB b DURABLE {"n":2}`, "ACK b g 1", `PUB b DURABLE {"n":3}`, "STATUS b",
	}
	if _, err := io.WriteString(c.nc, strings.Join(script, "\n")+"\n"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, want := range []string{
		"OK 0 DURABLE", "OK 1 DURABLE", "TOPIC b next=2 ", "END 1",
		"MSG 0 ", "MSG 1 ", "END 2", "OK 2 DURABLE", "ACKED 2", "OK 3 DURABLE", "TOPIC b next=4 ", "GROUP b g committed=2 held=true", "END 1",
	} {
		l := c.read()
		got = append(got, l)
		if !strings.HasPrefix(l, want) {
			t.Fatalf("replies %q: the last one, want %q", got, want)
		}
	}
}

// gateListener wraps the server's listener: once armed, the first write
// to each connection it accepts is sent to first (a copy) and then waits
// for gate, so a test can hold a connection's replies where it wants.
type gateListener struct {
	net.Listener
	armed atomic.Bool
	first chan []byte
	gate  chan struct{}
}

func (l *gateListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil || !l.armed.Load() {
		return nc, err
	}
	return &gateConn{Conn: nc, l: l}, nil
}

type gateConn struct {
	net.Conn
	l    *gateListener
	once sync.Once
}

func (c *gateConn) Write(p []byte) (int, error) {
	c.once.Do(func() {
		c.l.first <- bytes.Clone(p)
		<-c.l.gate
	})
	return c.Conn.Write(p)
}

// waitFor polls cond until it holds (10 s at most): a condition the
// server reaches, not a duration.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestPipelineBoundStopsReading: a client that sends many PUBs and reads
// no reply. Its replies are held at the connection's first write, which
// carried R complete replies: the server then takes exactly R +
// max-pipeline lines and stops reading, which a PUB from a second
// connection proves: it gets offset R + max-pipeline. Once the replies
// flow, every line is answered, in order.
func TestPipelineBoundStopsReading(t *testing.T) {
	const depth, n = 4, 2000
	e := newEnv(t, Options{MaxPipeline: depth}, groups.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl := &gateListener{Listener: ln, first: make(chan []byte, 1), gate: make(chan struct{})}
	e.srv.serve(gl)
	released := false
	release := func() {
		if !released {
			released = true
			close(gl.gate)
		}
	}
	t.Cleanup(release) // before Stop (cleanups run last first)
	other := e.dial(t)
	expectPrefix(t, other.do("STATUS"), "END 0") // accepted: not gated
	gl.armed.Store(true)

	c := e.dial(t)
	var burst bytes.Buffer
	for i := range n {
		fmt.Fprintf(&burst, `PUB b DURABLE {"n":%d}`+"\n", i)
	}
	wrote := make(chan error, 1)
	go func() { _, err := c.nc.Write(burst.Bytes()); wrote <- err }()
	first := <-gl.first
	taken := int64(bytes.Count(first, []byte("\n")) + depth)
	waitFor(t, "the lines taken to be stored", func() bool { return e.topicLen("b") >= taken })
	expectPrefix(t, other.do(`PUB b DURABLE {"n":-1}`), fmt.Sprintf("OK %d DURABLE", taken))
	if got := e.topicLen("b"); got != taken+1 {
		t.Fatalf("topic b holds %d messages, want %d taken from the held connection and 1", got, taken+1)
	}
	release()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	prev := int64(-1)
	for i, l := range c.readN(n) {
		var off int64
		if _, err := fmt.Sscanf(l, "OK %d DURABLE", &off); err != nil || off <= prev || (int64(i) < taken && off != int64(i)) {
			t.Fatalf("reply %d %q after offset %d", i, l, prev)
		}
		prev = off
	}
	if prev != n {
		t.Fatalf("last offset %d, want %d", prev, n)
	}
}

// TestPipelineStopAnswersInFlight: PUBs in flight (their commit held
// before its fsync) when Stop begins all get their real reply, in order,
// before the connection is closed: every stored message was answered.
func TestPipelineStopAnswersInFlight(t *testing.T) {
	var armed atomic.Bool
	reached, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hooks := &storage.Hooks{AfterSegmentWrite: func() {
		if armed.Load() {
			once.Do(func() { close(reached); <-hold })
		}
	}}
	e := start(t, Options{}, groups.Options{}, func(o *storage.Options) { o.Hooks = hooks })
	var released sync.Once
	release := func() { released.Do(func() { close(hold) }) }
	t.Cleanup(release) // a failed test does not leave Stop waiting for the held commit
	c := e.dial(t)
	expectPrefix(t, c.do(`PUB s DURABLE {"n":0}`), "OK 0 DURABLE")
	armed.Store(true)
	var burst bytes.Buffer
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&burst, `PUB s DURABLE {"n":%d}`+"\n", i)
	}
	if _, err := c.nc.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	<-reached // a commit with the first of them is held
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- e.srv.Stop(ctx)
	}()
	waitFor(t, "Stop to begin", e.srv.closing.Load)
	release()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	stored := e.topicLen("s")
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	all, err := io.ReadAll(c.r)
	if err != nil {
		t.Fatalf("after Stop: %v", err)
	}
	replies := strings.Split(strings.TrimSuffix(string(all), "\n"), "\n")
	if int64(len(replies)) != stored-1 || stored < 2 {
		t.Fatalf("%d messages stored after the first, %d replies: %q", stored-1, len(replies), replies)
	}
	for i, l := range replies {
		if want := fmt.Sprintf("OK %d DURABLE", i+1); l != want {
			t.Fatalf("reply %d %q, want %q", i, l, want)
		}
	}
}

// TestPipelineBudget: pipelined PUBs hold their stored bytes in the
// in-flight budget until durable: with room for three, a commit held
// shows three held; the lines after them wait for room instead of being
// queued (the storage queue, with room for under four, would refuse them
// as full); all are answered OK in order and the budget is empty after. A
// budget used up by others does not stop a connection: a PUB with nothing
// outstanding goes ahead without holding bytes.
func TestPipelineBudget(t *testing.T) {
	var armed atomic.Bool
	reached, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hooks := &storage.Hooks{AfterSegmentWrite: func() {
		if armed.Load() {
			once.Do(func() { close(reached); <-hold })
		}
	}}
	line := func(i int) string { return fmt.Sprintf(`PUBID bt DURABLE id-%03d {"n":%d}`, i, i%10) }
	size := func() int64 {
		m, err := contract.EncodeMessage("bt", []byte(`{"n":0}`), "id-000", nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return int64(len(m))
	}()
	budget := contract.NewBudget(3*size + size/2)
	entry := storage.HeaderSize + size
	e := start(t, Options{Budget: budget}, groups.Options{}, func(o *storage.Options) {
		o.Hooks = hooks
		o.MaxPendingBytes = 3*entry + entry/2
	})
	var released sync.Once
	release := func() { released.Do(func() { close(hold) }) }
	t.Cleanup(release) // a failed test does not leave Stop waiting for the held commit
	c := e.dial(t)
	expectPrefix(t, c.do(line(0)), "OK 0 DURABLE")
	armed.Store(true)
	var burst bytes.Buffer
	for i := 1; i <= 20; i++ {
		burst.WriteString(line(i) + "\n")
	}
	if _, err := c.nc.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	<-reached
	waitFor(t, "three PUBs holding their bytes", func() bool { return budget.InUse() == 3*size })
	release()
	for i, l := range c.readN(20) {
		if want := fmt.Sprintf("OK %d DURABLE", i+1); l != want {
			t.Fatalf("reply %d %q, want %q", i, l, want)
		}
	}
	if n := budget.InUse(); n != 0 {
		t.Fatalf("the budget holds %d bytes after the replies", n)
	}

	if !budget.TryAcquire(budget.Max()) {
		t.Fatal("take the whole budget")
	}
	for i := 21; i <= 30; i++ {
		c.send(line(i))
	}
	for i, l := range c.readN(10) {
		if want := fmt.Sprintf("OK %d DURABLE", i+21); l != want {
			t.Fatalf("with the budget used up: reply %d %q, want %q", i, l, want)
		}
	}
	budget.Release(budget.Max())
}

// TestPipelineLineTooLongAfterPUBs: a line over max-line-bytes after
// pipelined PUBs is answered after them, the connection is then closed,
// and the PUB sent after it is not run.
func TestPipelineLineTooLongAfterPUBs(t *testing.T) {
	e := start(t, Options{}, groups.Options{}) // max-line-bytes 1024
	c := e.dial(t)
	script := `PUB tl DURABLE {"n":0}` + "\n" + `PUB tl WRITTEN {"n":1}` + "\n" + `PUB tl DURABLE {"n":2}` + "\n" +
		`PUB tl DURABLE "` + strings.Repeat("x", 2000) + `"` + "\n" + `PUB tl DURABLE {"n":3}` + "\n"
	if _, err := io.WriteString(c.nc, script); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"OK 0 DURABLE", "OK 1 WRITTEN", "OK 2 DURABLE", "ERR TOO_LARGE line is over 1024 bytes"} {
		if got := c.read(); !strings.HasPrefix(got, want) {
			t.Fatalf("reply %d %q, want %q", i, got, want)
		}
	}
	c.expectClosed()
	waitFor(t, "the WRITTEN PUB durable", func() bool { return e.topicLen("tl") >= 3 })
	if got := strings.Join(e.contentsOf(t, "tl"), ","); got != "0,1,2" {
		t.Fatalf("topic holds %s", got)
	}
}

// TestPipelineConfig: mmmq.lineproto.max-pipeline is 128 by default,
// set by the file or MMMQ_LINEPROTO_MAX_PIPELINE, and must be 1 to
// MaxPipelineLimit: an error names the key.
func TestPipelineConfig(t *testing.T) {
	load := func(yaml string, env ...string) (Config, error) {
		p := filepath.Join(t.TempDir(), "mmmq.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(config.LoadOptions{Path: p, PathExplicit: true, Environ: append([]string{}, env...), Sections: []config.Section{ConfigSection}})
		if err != nil {
			return Config{}, err
		}
		return config.SectionValue(cfg, ConfigSection), nil
	}
	if c, err := load("mmmq: {}"); err != nil || c.MaxPipeline != DefaultMaxPipeline || DefaultMaxPipeline != 128 {
		t.Fatalf("default: %+v %v", c, err)
	}
	if c, err := load("mmmq: {lineproto: {max-pipeline: 16}}", "MMMQ_LINEPROTO_MAX_PIPELINE=7"); err != nil || c.MaxPipeline != 7 {
		t.Fatalf("environment over file: %+v %v", c, err)
	}
	for _, v := range []int64{0, -1, MaxPipelineLimit + 1} {
		if _, err := load(fmt.Sprintf("mmmq: {lineproto: {max-pipeline: %d}}", v)); err == nil || !strings.Contains(err.Error(), "mmmq.lineproto.max-pipeline") {
			t.Fatalf("max-pipeline %d: %v", v, err)
		}
	}
	if o := OptionsFromConfig(Config{MaxPipeline: 7}, topicqueue.SegmentConfig{}); o.MaxPipeline != 7 {
		t.Fatalf("OptionsFromConfig: MaxPipeline %d", o.MaxPipeline)
	}
}
