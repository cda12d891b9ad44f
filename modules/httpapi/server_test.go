package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// topicsBody is the 200 body of GET /topics.
type topicsBody struct {
	Topics      []TopicInfo       `json:"topics"`
	Quarantined map[string]string `json:"quarantined"`
}

// GET /topics lists the open topics sorted by name with their stats ([]
// when there are none), the quarantined ones apart with the reason, and a
// failed log with its failure.
func TestTopicsList(t *testing.T) {
	mem := vfs.NewMem()
	a := newAPI(t, Options{}, topicqueue.Options{Root: "/data", Storage: storage.Options{FS: mem}})
	rec := a.call(http.MethodGet, "/topics", "", "")
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"topics":[]}` {
		t.Fatalf("no topics: HTTP %d %s, want {\"topics\":[]}", rec.Code, rec.Body)
	}

	a.publish("t.b", `{"n":0}`)
	a.publish("t.a", `{"n":0}`)
	a.publish("t.a", `{"n":1}`)
	a.reg.Quarantine("t.q", errors.New("corrupt entry at offset 7"))
	var body topicsBody
	decodeJSON(t, a.call(http.MethodGet, "/topics", "", ""), &body)
	if len(body.Topics) != 2 || body.Topics[0].Name != "t.a" || body.Topics[1].Name != "t.b" {
		t.Fatalf("topics %+v, want t.a then t.b", body.Topics)
	}
	for i, want := range []int64{2, 1} {
		if tp := body.Topics[i]; tp.NextOffset != want || tp.Segments != 1 || tp.Bytes <= 0 || tp.Failed != "" {
			t.Errorf("topic %+v, want nextOffset %d, one segment, some bytes, not failed", tp, want)
		}
	}
	if len(body.Quarantined) != 1 || body.Quarantined["t.q"] != "corrupt entry at offset 7" {
		t.Errorf("quarantined %v", body.Quarantined)
	}

	// An fsync error fails t.b's log (503 TOPIC_FAILED): it is listed with the failure.
	mem.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.Contains(name, "/t.b/") {
			return &fs.PathError{Op: "sync", Path: name, Err: syscall.EIO}
		}
		return nil
	})
	wantNACK(t, a.call(http.MethodPost, "/messages", "", `{"topic":"t.b","content":1}`), http.StatusServiceUnavailable, contract.CodeTopicFailed)
	mem.SetHook(nil)
	body = topicsBody{}
	decodeJSON(t, a.call(http.MethodGet, "/topics", "", ""), &body)
	if tp := body.Topics[1]; tp.Name != "t.b" || !strings.Contains(tp.Failed, "input/output error") || tp.NextOffset != 1 {
		t.Errorf("failed topic %+v, want its failure and nextOffset 1", tp)
	}
	if body.Topics[0].Failed != "" {
		t.Errorf("t.a failed too: %+v", body.Topics[0])
	}
}

type readiness bool

func (r readiness) Ready() bool { return bool(r) }

// unhealthyBackend is a local backend whose store "does not answer".
type unhealthyBackend struct {
	*topicqueue.LocalBackend
	err error
}

func (b unhealthyBackend) Healthy() error { return b.err }

// /readyz is 503 while the storage backend reports its store unreachable
// (contract.HealthChecker), with the reason; 200 again once it answers.
func TestReadyzFollowsBackendHealth(t *testing.T) {
	root := t.TempDir()
	b := &unhealthyBackend{LocalBackend: &topicqueue.LocalBackend{Root: root}, err: errors.New("jetstream: not connected")}
	reg := topicqueue.New(topicqueue.Options{Root: root, Backend: b})
	a := &api{t: t, s: New(Options{}, reg, readiness(true), zaptest.NewLogger(t))}
	rec := a.call(http.MethodGet, "/readyz", "", "")
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "jetstream: not connected") {
		t.Errorf("readyz with the store down: HTTP %d %s, want 503 naming the cause", rec.Code, rec.Body)
	}
	b.err = nil
	if rec := a.call(http.MethodGet, "/readyz", "", ""); rec.Code != 200 {
		t.Errorf("readyz with the store back: HTTP %d %s, want 200", rec.Code, rec.Body)
	}
}

// /readyz is 503 until startup recovery has finished, 200 after (and
// without a Readiness); /healthz is always 200.
func TestReadyzAndHealthz(t *testing.T) {
	for _, tc := range []struct {
		ready  Readiness
		status int
		body   string
	}{
		{readiness(false), 503, `{"ready":false}`},
		{readiness(true), 200, `{"ready":true}`},
		{nil, 200, `{"ready":true}`},
	} {
		s := New(Options{}, nil, tc.ready, zaptest.NewLogger(t))
		a := &api{t: t, s: s}
		rec := a.call(http.MethodGet, "/readyz", "", "")
		if rec.Code != tc.status || strings.TrimSpace(rec.Body.String()) != tc.body {
			t.Errorf("readyz with %v: HTTP %d %s, want %d %s", tc.ready, rec.Code, rec.Body, tc.status, tc.body)
		}
		if rec := a.call(http.MethodGet, "/healthz", "", ""); rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"status":"ok"}` {
			t.Errorf("healthz: HTTP %d %s", rec.Code, rec.Body)
		}
	}
}

// A body that stops arriving is 408 TIMEOUT when the read timed out and 400
// when the connection failed; a single publish over max-record-bytes is
// 413. Nothing is stored.
func TestPublishBodyErrors(t *testing.T) {
	a := newAPI(t, Options{MaxRecordBytes: 200}, topicqueue.Options{})
	start := `{"topic":"body.t","content":`
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
		text   string
	}{
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, 408, contract.CodeTimeout, "server.read-timeout"},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, 400, contract.CodeBadRequest, "could not be read"},
		{"unexpected EOF", io.ErrUnexpectedEOF, 400, contract.CodeBadRequest, "could not be read"},
	} {
		for _, path := range []string{"/messages", "/messages/batch"} {
			req, err := http.NewRequest(http.MethodPost, path, &failingBody{data: start, err: tc.err})
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			a.s.Handler().ServeHTTP(rec, req)
			t.Run(tc.name+" "+path, func(t *testing.T) { wantNACK(t, rec, tc.status, tc.code, tc.text) })
		}
	}
	body := `{"topic":"body.t","content":"` + strings.Repeat("x", 200) + `"}`
	wantNACK(t, a.call(http.MethodPost, "/messages", "", body), http.StatusRequestEntityTooLarge, contract.CodeTooLarge, "max-record-bytes")
	wantNACK(t, a.call(http.MethodPost, "/messages?ack=maybe", "", `{"topic":"body.t","content":1}`), http.StatusBadRequest, contract.CodeBadRequest, "ack")
	// Given twice, the level is ambiguous: refused, not the first taken.
	for _, q := range []string{"?ack=accepted&ack=durable", "?ack=durable&ack=durable", "?ack=written&ack=d%75rable"} {
		wantNACK(t, a.call(http.MethodPost, "/messages"+q, "", `{"topic":"body.t","content":1}`), http.StatusBadRequest, contract.CodeBadRequest, "given 2 times")
		wantNACK(t, a.call(http.MethodPost, "/messages/batch"+q, "", `[{"topic":"body.t","content":1}]`), http.StatusBadRequest, contract.CodeBadRequest, "given 2 times")
	}
	// A query Go's parser cannot read is refused, not read without its
	// bad pairs (the level would silently be the default).
	for _, q := range []string{"?ack=accepted;x", "?ack=written;", "?ack=%ZZ", "?ack=accepted&ack=durable;", "?x=%zz&ack=accepted"} {
		wantNACK(t, a.call(http.MethodPost, "/messages"+q, "", `{"topic":"body.t","content":1}`), http.StatusBadRequest, contract.CodeBadRequest, "query string")
	}
	a.noTopics()
}

// Start listens (port 0 picks a free port, which Addr then reports), serves
// until Stop, and refuses an address already in use and overlapping routes.
func TestStartStop(t *testing.T) {
	log := zaptest.NewLogger(t)
	s := New(Options{Addr: "127.0.0.1:0"}, nil, nil, log)
	if s.Addr() != "127.0.0.1:0" {
		t.Errorf("Addr before Start = %q", s.Addr())
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	if strings.HasSuffix(addr, ":0") {
		t.Fatalf("Addr after Start = %q, want the bound port", addr)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz over TCP: HTTP %d", resp.StatusCode)
	}

	taken := New(Options{Addr: addr}, nil, nil, log)
	if err := taken.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "listen on "+addr) {
		t.Errorf("Start on a taken address = %v, want a listen error naming it", err)
		_ = taken.Stop(context.Background())
	}

	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := client.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("the server still answers after Stop")
	}

	dup := New(Options{Addr: "127.0.0.1:0"}, nil, nil, log, twiceRoute{}, twiceRoute{})
	if err := dup.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "GET /twice") || !errors.Is(err, dup.Err()) {
		t.Errorf("Start with overlapping routes = %v, want the overlap (Err %v)", err, dup.Err())
	}
}

// twiceRoute registers GET /twice; two of them overlap.
type twiceRoute struct{}

func (twiceRoute) Register(r *mux.Router) {
	r.HandleFunc("/twice", func(http.ResponseWriter, *http.Request) {}).Methods(http.MethodGet)
}

// OptionsFromConfig copies the server section and max-record-bytes, and
// NewFromConfig refuses overlapping routes.
func TestOptionsFromConfig(t *testing.T) {
	c := config.ServerConfig{Host: "127.0.0.1", Port: 8181, ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 3 * time.Second, IdleTimeout: 4 * time.Second, ShutdownTimeout: 5 * time.Second, MaxBodyBytes: 4096}
	got := OptionsFromConfig(c, topicqueue.SegmentConfig{MaxBytes: 1 << 20, MaxRecordBytes: 2048})
	want := Options{Addr: "127.0.0.1:8181", ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 3 * time.Second,
		IdleTimeout: 4 * time.Second, ShutdownTimeout: 5 * time.Second, MaxBodyBytes: 4096, MaxRecordBytes: 2048}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("OptionsFromConfig = %+v, want %+v", got, want)
	}
	budget := contract.NewBudget(1 << 20)
	s, err := NewFromConfig(Params{Server: c, Logger: zaptest.NewLogger(t), Budget: budget, Routes: []contract.Route{twiceRoute{}}})
	if err != nil || s.opts.Budget != budget || s.opts.MaxRecordBytes != 0 {
		t.Errorf("NewFromConfig = %v (budget %p, max record %d)", err, s.opts.Budget, s.opts.MaxRecordBytes)
	}
	if _, err := NewFromConfig(Params{Server: c, Logger: zaptest.NewLogger(t), Routes: []contract.Route{twiceRoute{}, twiceRoute{}}}); err == nil {
		t.Error("NewFromConfig with overlapping routes succeeded")
	}
}
