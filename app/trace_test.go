package app_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/plugins/lineproto"
)

// tracePush is one message a trace consumer saw: the push's trace headers
// as they arrived (raw values; nil when absent) and the message's stored
// headers from the body.
type tracePush struct {
	dispatcher, topic string
	offset            int64
	traceparent       []string
	tracestate        []string
	batch             bool
	headers           map[string]string
	content           json.RawMessage
}

// traceConsumer records every push; while nacking is set it NACKs a
// message whose content is {"nack":true}.
type traceConsumer struct {
	mu      sync.Mutex
	got     []tracePush
	nacking atomic.Bool
	srv     *httptest.Server
}

func newTraceConsumer(t *testing.T) *traceConsumer {
	c := &traceConsumer{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		type stored struct {
			Headers map[string]string `json:"headers"`
			Content json.RawMessage   `json:"content"`
			Offset  int64             `json:"offset"`
		}
		var ms []stored
		batch := strings.HasPrefix(string(b), "[")
		if batch {
			require.NoError(t, json.Unmarshal(b, &ms), "%s", b)
		} else {
			var m stored
			require.NoError(t, json.Unmarshal(b, &m), "%s", b)
			m.Offset, _ = strconv.ParseInt(r.Header.Get("mmmq-offset"), 10, 64)
			ms = []stored{m}
		}
		ack := `{"acknowledgement":"ACK"}`
		c.mu.Lock()
		for _, m := range ms {
			c.got = append(c.got, tracePush{dispatcher: r.Header.Get("mmmq-consumer-id"), topic: r.Header.Get("mmmq-topic"), offset: m.Offset,
				traceparent: r.Header.Values("traceparent"), tracestate: r.Header.Values("tracestate"), batch: batch, headers: m.Headers, content: m.Content})
			if c.nacking.Load() && string(m.Content) == `{"nack":true}` && r.Header.Get("mmmq-consumer-id") == "tr" {
				ack = `{"acknowledgement":"NACK"}`
			}
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, ack)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// waitPushes waits until n pushes by dispatcher name of topic have been
// seen and returns them.
func (c *traceConsumer) waitPushes(t *testing.T, name, topic string, n int) []tracePush {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var out []tracePush
		c.mu.Lock()
		for _, p := range c.got {
			if p.dispatcher == name && p.topic == topic {
				out = append(out, p)
			}
		}
		c.mu.Unlock()
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s got %d pushes of %s, want %d: %+v", name, len(out), topic, n, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// requireTrace checks that p carried traceparent tp and tracestate ts
// ("" for none) byte for byte as HTTP headers, once each.
func requireTrace(t *testing.T, p tracePush, tp, ts string) {
	t.Helper()
	require.Equal(t, []string{tp}, p.traceparent, "traceparent of %+v", p)
	if ts == "" {
		require.Nil(t, p.tracestate, "tracestate of %+v", p)
	} else {
		require.Equal(t, []string{ts}, p.tracestate, "tracestate of %+v", p)
	}
}

var droppedRe = regexp.MustCompile(`(?m)^mmmq_trace_context_dropped_total\{header="(traceparent|tracestate)"\} (\d+)$`)

// traceDropped scrapes the broker's dropped trace-context counts.
func traceDropped(t *testing.T, base string) map[string]int {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]int{}
	for _, m := range droppedRe.FindAllStringSubmatch(string(b), -1) {
		out[m[1]], _ = strconv.Atoi(m[2])
	}
	require.Len(t, out, 2, "no mmmq_trace_context_dropped_total series in /metrics")
	return out
}

// With tracing off, every push carries the publish's traceparent and
// tracestate byte for byte, whatever the path: a single publish (the
// HTTP header winning over the body's), batch members (their own, or the
// request's), a scheduled message, a NACKed message on every attempt, its
// dead letter, its redrive, the line protocol's PUBX, and a batch push
// (in the body). Read-back and group fetches show them. An invalid
// traceparent is dropped and counted, and the publish still succeeds.
func TestTraceContextEndToEnd(t *testing.T) {
	const (
		tp1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		ts1 = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
		tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
		ts2 = `vendor=a"b\c`
		tp3 = "01-11111111111111111111111111111111-2222222222222222-01-later-fields"
		tp4 = "00-44444444444444444444444444444444-4444444444444444-01"
		tp5 = "00-55555555555555555555555555555555-5555555555555555-00"
		tp6 = "00-66666666666666666666666666666666-6666666666666666-01"
	)
	cons := newTraceConsumer(t)
	cons.nacking.Store(true)
	h, err := dispatcher.ParseHost(cons.srv.URL)
	require.NoError(t, err)
	cfg := testConfig(t, t.TempDir())
	lpAddr := freeAddr(t)
	config.SetSectionValue(cfg, lineproto.ConfigSection, lineproto.Config{Addr: lpAddr, MaxLineBytes: lineproto.ConfigSection.Default().MaxLineBytes, MaxPipeline: lineproto.DefaultMaxPipeline})
	a, base := startBroker(t, cfg,
		provideDispatcher(dispatcher.New("tr", h, dispatcher.MustPattern("tr.**"))),
		provideDispatcher(dispatcher.New("trdl", h, dispatcher.MustPattern("dead-letter.tr"))),
		provideDispatcher(dispatcher.New("trb", h, dispatcher.MustPattern("tr.batch")).WithBatch(dispatcher.Batch{MaxMessages: 10})))
	defer a.RequireStop()
	c := newAPIClient(t, base)
	before := traceDropped(t, base)

	t.Run("single", func(t *testing.T) {
		// Single: the HTTP headers win over the body's.
		c.do(exchange{method: "POST", path: "/messages", header: map[string]string{"traceparent": tp1, "tracestate": ts1},
			body: `{"topic":"tr.single","content":1,"headers":{"traceparent":"` + tp2 + `","tracestate":"x=1","other":"kept"}}`, status: 200})
		requireTrace(t, cons.waitPushes(t, "tr", "tr.single", 1)[0], tp1, ts1)
	})

	t.Run("batch member", func(t *testing.T) {
		// Batch: member 0 has its own pair, member 1 takes the request's.
		c.do(exchange{method: "POST", path: "/messages/batch", header: map[string]string{"traceparent": tp1, "tracestate": ts1},
			body: `[{"topic":"tr.batch","content":0,"headers":{"traceparent":"` + tp2 + `","tracestate":` + strconv.Quote(ts2) + `}},{"topic":"tr.batch","content":1}]`, status: 200})
		ps := cons.waitPushes(t, "tr", "tr.batch", 2)
		requireTrace(t, ps[0], tp2, ts2)
		requireTrace(t, ps[1], tp1, ts1)
	})

	t.Run("batch push", func(t *testing.T) {
		// A batch push carries each message's in its body, none as headers.
		bs := cons.waitPushes(t, "trb", "tr.batch", 2)
		for i, want := range [][2]string{{tp2, ts2}, {tp1, ts1}} {
			require.True(t, bs[i].batch)
			require.Nil(t, bs[i].traceparent, "batch push with a traceparent header")
			require.Equal(t, want[0], bs[i].headers["traceparent"], "batch member %d", i)
			require.Equal(t, want[1], bs[i].headers["tracestate"], "batch member %d", i)
		}
	})

	t.Run("scheduled", func(t *testing.T) {
		// Scheduled: kept through the scheduler's move (a later version's
		// traceparent, with its extra fields, byte for byte).
		c.do(exchange{method: "POST", path: "/messages", header: map[string]string{"traceparent": tp3},
			body: `{"topic":"tr.sched","content":1,"delay":"200ms"}`, status: 200})
		requireTrace(t, cons.waitPushes(t, "tr", "tr.sched", 1)[0], tp3, "")
	})

	t.Run("dead letter", func(t *testing.T) {
		// NACKed: every attempt carries it; so does the dead letter's push.
		c.do(exchange{method: "POST", path: "/messages", header: map[string]string{"traceparent": tp4, "tracestate": ts1},
			body: `{"topic":"tr.dl","content":{"nack":true}}`, status: 200})
		dl := cons.waitPushes(t, "trdl", "dead-letter.tr", 1)[0]
		requireTrace(t, dl, tp4, ts1)
		attempts := cons.waitPushes(t, "tr", "tr.dl", 4)
		require.Len(t, attempts, 4)
		for _, p := range attempts {
			requireTrace(t, p, tp4, ts1)
		}
	})

	t.Run("redrive", func(t *testing.T) {
		// Redrive: the message is published again to its topic with them.
		cons.nacking.Store(false)
		c.do(exchange{method: "POST", path: "/mmmq/dispatchers/tr/redrive", body: `{}`, status: 200})
		redriven := cons.waitPushes(t, "tr", "tr.dl", 5)[4]
		require.Equal(t, int64(1), redriven.offset, "the redriven message is a new one")
		requireTrace(t, redriven, tp4, ts1)
	})

	t.Run("line protocol", func(t *testing.T) {
		// The line protocol's PUBX.
		conn, err := net.Dial("tcp", lpAddr)
		require.NoError(t, err)
		defer conn.Close()
		fmt.Fprintf(conn, "PUBX tr.lp DURABLE traceparent=%s tracestate=%s {\"n\":1}\n", tp5, strings.ReplaceAll(ts1, " ", "%20"))
		line, err := bufio.NewReader(conn).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "OK 0 DURABLE\n", line)
		requireTrace(t, cons.waitPushes(t, "tr", "tr.lp", 1)[0], tp5, ts1)
	})

	t.Run("invalid dropped and counted", func(t *testing.T) {
		// Invalid: dropped and counted, the publish succeeds, nothing pushed.
		c.do(exchange{method: "POST", path: "/messages", header: map[string]string{"traceparent": "ff" + tp6[2:], "tracestate": ts1},
			body: `{"topic":"tr.bad","content":1}`, status: 200})
		c.do(exchange{method: "POST", path: "/messages", header: map[string]string{"traceparent": tp6, "tracestate": "Bad=1"},
			body: `{"topic":"tr.bad","content":2}`, status: 200})
		bad := cons.waitPushes(t, "tr", "tr.bad", 2)
		require.Nil(t, bad[0].traceparent)
		require.Nil(t, bad[0].tracestate)
		requireTrace(t, bad[1], tp6, "")
		after := traceDropped(t, base)
		assert.Equal(t, 1, after["traceparent"]-before["traceparent"], "traceparent drops")
		assert.Equal(t, 2, after["tracestate"]-before["tracestate"], "tracestate drops")
	})

	t.Run("read-back and group fetch", func(t *testing.T) {
		// Read-back and a group fetch show the stored headers.
		type page struct {
			Messages []struct {
				Message struct {
					Headers map[string]string `json:"headers"`
				} `json:"message"`
			} `json:"messages"`
		}
		for _, ex := range []exchange{
			{method: "GET", path: "/topics/tr.single/messages", status: 200},
			{method: "POST", path: "/topics/tr.single/groups/g/fetch?max=1", status: 200},
		} {
			ans := c.do(ex)
			var p page
			require.NoError(t, json.Unmarshal(ans.body, &p), "%s", ans.body)
			require.Len(t, p.Messages, 1, "%s %s: %s", ex.method, ex.path, ans.body)
			assert.Equal(t, map[string]string{"traceparent": tp1, "tracestate": ts1, "other": "kept"}, p.Messages[0].Message.Headers, "%s %s", ex.method, ex.path)
		}
	})
}

// A dispatcher's static headers may not set traceparent or tracestate:
// refused with the rule by the admin API (400) and in the configuration
// file at startup (naming the key).
func TestStaticTraceHeadersRefused(t *testing.T) {
	a, base := startBroker(t, testConfig(t, t.TempDir()))
	defer a.RequireStop()
	c := newAPIClient(t, base)
	for _, name := range []string{"traceparent", "Tracestate"} {
		ans := c.do(exchange{method: "POST", path: "/mmmq/dispatchers", status: 400,
			body: `{"name":"api-d","host":"http://127.0.0.1:9","patterns":["x"],"headers":{"` + name + `":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`}).json(t)
		assert.Contains(t, ans["error"], "reserved", "%v", ans)
		assert.Contains(t, ans["error"], name, "%v", ans)
	}
	_, err := loadStock(t, "mmmq: {broker: {dispatchers: [{name: f, host: \"http://localhost:8081\", patterns: [x], headers: {tracestate: a=1}}]}}")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mmmq.broker.dispatchers[0].headers")
	assert.Contains(t, err.Error(), "reserved")
}
