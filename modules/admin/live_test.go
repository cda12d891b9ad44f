package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/webhooks"
)

// liveAdmin is an Admin over a running dispatcher Manager (topics in
// memory, dead letters on), its dispatchers.json in a real directory and
// the admin API served over HTTP.
type liveAdmin struct {
	t    *testing.T
	reg  *topicqueue.Registry
	m    *dispatcher.Manager
	a    *Admin
	dir  string
	base string
}

// startAdmin starts a Manager with the dispatchers ds (declared in "Go
// code") and an Admin keeping its api dispatchers in dir. A Manager
// resends a NACKed message once (max-resends 1) and backs off briefly.
func startAdmin(t *testing.T, reg *topicqueue.Registry, dir string, ds ...*dispatcher.Dispatcher) *liveAdmin {
	t.Helper()
	l := startAdminWith(t, reg, NewStore(vfs.OS{}, dir), ds...)
	l.dir = dir
	return l
}

// startAdminWith is startAdmin with the api dispatchers kept in store.
func startAdminWith(t *testing.T, reg *topicqueue.Registry, store SpecStore, ds ...*dispatcher.Dispatcher) *liveAdmin {
	t.Helper()
	log := zaptest.NewLogger(t)
	set, err := dispatcher.SetOf(ds...)
	if err != nil {
		t.Fatal(err)
	}
	opts := dispatcher.Options{BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond}.WithMaxResends(1)
	sender := dispatcher.NewHTTPSender(opts)
	t.Cleanup(sender.CloseIdleConnections)
	m := dispatcher.NewManager(set, dispatcher.RegistrySource(reg), sender, opts, log)
	m.SetPublisher(dispatcher.RegistryPublisher(reg))
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := New(m, set, store, Options{Defaults: dispatcher.ConfigSection.Default(), Logger: log})
	if err := a.Start(); err != nil {
		m.Stop(context.Background())
		t.Fatal(err)
	}
	r := mux.NewRouter()
	NewRoute(a).Register(r)
	srv := httptest.NewServer(r)
	t.Cleanup(func() {
		srv.Close()
		_ = a.Stop()
		m.Stop(context.Background())
	})
	return &liveAdmin{t: t, reg: reg, m: m, a: a, base: srv.URL}
}

// newRegistry is a topic registry in memory.
func newRegistry(t *testing.T) *topicqueue.Registry {
	reg := topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: vfs.NewMem(), Logger: zaptest.NewLogger(t)}})
	t.Cleanup(func() { reg.Close() })
	return reg
}

// call sends method path with body and returns the status and the raw
// answer.
func (l *liveAdmin) call(method, path, body string) (int, string) {
	l.t.Helper()
	req, err := http.NewRequest(method, l.base+path, strings.NewReader(body))
	if err != nil {
		l.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		l.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// must sends the request, requires status want and decodes the answer
// into v (when not nil).
func (l *liveAdmin) must(method, path, body string, want int, v any) string {
	l.t.Helper()
	st, out := l.call(method, path, body)
	if st != want {
		l.t.Fatalf("%s %s %s: %d %s; want %d", method, path, body, st, out, want)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(out), v); err != nil {
			l.t.Fatalf("%s %s: %v: %s", method, path, err, out)
		}
	}
	return out
}

// publish stores n messages in topic.
func (l *liveAdmin) publish(topic string, n int) {
	l.t.Helper()
	for i := range n {
		stored := fmt.Sprintf(`{"topic":{"name":%q},"content":{"i":%d},"id":"m%d","headers":{"k":"v"}}`, topic, i, i)
		if _, _, err := l.reg.Publish(context.Background(), topic, [][]byte{[]byte(stored)}, contract.Durable); err != nil {
			l.t.Fatal(err)
		}
	}
}

// fileText is dispatchers.json.
func (l *liveAdmin) fileText() string {
	l.t.Helper()
	b, err := os.ReadFile(filepath.Join(l.dir, contract.DispatchersFile))
	if err != nil {
		l.t.Fatal(err)
	}
	return string(b)
}

// nackServer answers every push with a NACK and counts the pushes, and
// sends the headers of the last one on got.
// ackServer is a consumer that ACKs every push, except while the switch it
// returns is on: then other answers.
func ackServer(t *testing.T, other func(w http.ResponseWriter)) (*httptest.Server, *atomic.Bool) {
	var on atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if on.Load() {
			other(w)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"acknowledgement":"ACK"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &on
}

func nackServer(t *testing.T) (*httptest.Server, chan http.Header) {
	got := make(chan http.Header, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case got <- r.Header.Clone():
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"acknowledgement":"NACK"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// newSecret returns a fresh serialized signing secret.
func newSecret(t *testing.T) string {
	s, err := webhooks.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// redacted is the redacted form of the serialized secret s.
func redacted(t *testing.T, s string) string { return mustSecret(t, s).String() }

// TestSecretsNeverShownButKept: an api dispatcher's signing secrets and
// header values are redacted in every answer (create, get, list, pause,
// replace) and kept for real in dispatchers.json (mode 0600), from which a
// restart restores them: the pushes after it are signed with the same key
// and carry the same header. A PUT of what GET showed, edited, keeps the
// redacted secret and header and adds the new ones.
func TestSecretsNeverShownButKept(t *testing.T) {
	type push struct {
		h    http.Header
		body []byte
	}
	pushes := make(chan push, 100)
	cons := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		pushes <- push{r.Header.Clone(), b}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"acknowledgement":"ACK"}`)
	}))
	defer cons.Close()
	reg, dir := newRegistry(t), t.TempDir()
	l := startAdmin(t, reg, dir)
	sec1, sec2 := newSecret(t), newSecret(t)
	create := fmt.Sprintf(`{"name":"signed","host":%q,"patterns":["s.*"],"signing-secrets":[%q],"headers":{"Authorization":"Bearer s3cret-token","X-Team":"billing"},"paused":true}`,
		cons.URL, sec1)
	var created Listed
	answers := []string{l.must("POST", "/mmmq/dispatchers", create, 201, &created)}
	if want := []string{redacted(t, sec1)}; strings.Join(created.SigningSecrets, " ") != want[0] ||
		created.Headers["Authorization"] != RedactedValue || created.Headers["X-Team"] != RedactedValue {
		t.Fatalf("created: %+v", created.Spec)
	}
	var st Status
	answers = append(answers, l.must("GET", "/mmmq/dispatchers/signed", "", 200, &st),
		l.must("GET", "/mmmq/dispatchers", "", 200, nil))

	// GET, edit (another pattern, a second secret, a new header), PUT.
	st.Patterns = append(st.Patterns, "t.*")
	st.SigningSecrets = append(st.SigningSecrets, sec2)
	st.Headers["X-New"] = "fresh"
	st.Paused = false
	body, _ := json.Marshal(st.Spec)
	var replaced Listed
	answers = append(answers, l.must("PUT", "/mmmq/dispatchers/signed", string(body), 200, &replaced))
	if strings.Join(replaced.SigningSecrets, " ") != redacted(t, sec1)+" "+redacted(t, sec2) || len(replaced.Headers) != 3 {
		t.Fatalf("replaced: %+v", replaced.Spec)
	}
	for _, a := range answers {
		for _, secret := range []string{sec1, sec2, "s3cret-token", "billing", "fresh"} {
			if strings.Contains(a, strings.TrimPrefix(secret, webhooks.SecretPrefix)) {
				t.Fatalf("an answer shows %q: %s", secret, a)
			}
		}
	}
	file := l.fileText()
	for _, want := range []string{sec1, sec2, `"Bearer s3cret-token"`, `"X-Team": "billing"`, `"X-New": "fresh"`, `"t.*"`} {
		if !strings.Contains(file, want) {
			t.Fatalf("dispatchers.json lacks %s:\n%s", want, file)
		}
	}
	if strings.Contains(file, RedactedValue) || strings.Contains(file, "fingerprint") {
		t.Fatalf("dispatchers.json holds a redacted form:\n%s", file)
	}
	if fi, err := os.Stat(filepath.Join(dir, contract.DispatchersFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("dispatchers.json mode %v, %v; want 0600", fi.Mode(), err)
	}

	// A pause rewrites the file: still the real values.
	l.must("POST", "/mmmq/dispatchers/signed/pause", "", 200, nil)
	if f := l.fileText(); !strings.Contains(f, sec1) || !strings.Contains(f, "s3cret-token") {
		t.Fatalf("after a pause dispatchers.json lost the secrets:\n%s", f)
	}
	l.must("POST", "/mmmq/dispatchers/signed/resume", "", 200, nil)

	// Restart: the pushes are signed with both secrets and carry the header.
	l.m.Stop(context.Background())
	l = startAdmin(t, reg, dir)
	l.publish("s.one", 1)
	p := <-pushes
	if p.h.Get("Authorization") != "Bearer s3cret-token" || p.h.Get("X-Team") != "billing" || p.h.Get("X-New") != "fresh" {
		t.Fatalf("push after the restart: headers %v", p.h)
	}
	for _, sec := range []string{sec1, sec2} {
		v := webhooks.NewVerifier(time.Minute, mustSecret(t, sec))
		if err := v.Verify(p.h, p.body); err != nil {
			t.Fatalf("push after the restart is not signed with %s: %v", redacted(t, sec), err)
		}
	}
}

func mustSecret(t *testing.T, s string) webhooks.Secret {
	t.Helper()
	sec, err := webhooks.ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// entries reads every stored message of topic, decoded.
func (l *liveAdmin) entries(topic string) []map[string]any {
	l.t.Helper()
	q, ok := l.reg.Get(topic)
	if !ok {
		return nil
	}
	es, err := q.ReadBatch(0, int(q.HighWatermark()))
	if err != nil {
		l.t.Fatal(err)
	}
	out := make([]map[string]any, len(es))
	for i, e := range es {
		if err := json.Unmarshal(e.Payload, &out[i]); err != nil {
			l.t.Fatal(err)
		}
	}
	return out
}

// waitStatus polls GET /mmmq/dispatchers/{name} until ok says yes.
func (l *liveAdmin) waitStatus(name string, ok func(Status) bool) Status {
	l.t.Helper()
	var st Status
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st = Status{}
		l.must("GET", "/mmmq/dispatchers/"+name, "", 200, &st)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("status of %s never got there: %+v", name, st)
		}
	}
}

// TestRedrive: messages a consumer NACKs on every attempt are
// dead-lettered, which GET shows (deadLettered per topic, deadLetterTopic);
// POST .../redrive publishes a range of them, then the rest, to their
// original topics again, for a dispatcher declared in Go code too (a
// redrive changes no dispatcher). Bad bodies and ranges are 400s naming
// the problem and publish nothing; an unknown dispatcher is 404; one whose
// dead letters are off is 409 NO_DEAD_LETTERS.
func TestRedrive(t *testing.T) {
	nack, _ := nackServer(t)
	host, err := dispatcher.ParseHost(nack.URL)
	if err != nil {
		t.Fatal(err)
	}
	l := startAdmin(t, newRegistry(t), t.TempDir(), dispatcher.New("gd", host, dispatcher.MustPattern("r.*")))
	l.publish("r.a", 2)
	l.publish("r.b", 1)
	st := l.waitStatus("gd", func(st Status) bool {
		n := uint64(0)
		for _, ts := range st.Topics {
			n += ts.DeadLettered
		}
		return n == 3
	})
	if st.DeadLetterTopic != "dead-letter.gd" || st.DeadLetter == nil || *st.DeadLetter != "dead-letter.gd" || st.Source != "go" {
		t.Fatalf("status: %+v", st)
	}
	for _, ts := range st.Topics {
		if ts.Exhausted != ts.DeadLettered {
			t.Errorf("%s: exhausted %d, dead-lettered %d", ts.Topic, ts.Exhausted, ts.DeadLettered)
		}
	}
	// Paused, so that the redriven messages stay where they are put.
	l.must("POST", "/mmmq/dispatchers/gd/pause", "", 200, nil)
	dead := l.entries("dead-letter.gd")
	if len(dead) != 3 {
		t.Fatalf("dead letters: %v", dead)
	}

	for body, says := range map[string]string{
		`{"from":-1}`:          `field "from" must be an integer >= 0`,
		`{"to":1.5}`:           `field "to" must be an integer >= 0`,
		`{"to":"2"}`:           `field "to" must be an integer >= 0`,
		`{"from":null}`:        `field "from" must be an integer >= 0`,
		`{"from":0,"count":1}`: `unknown field "count"`,
		`[0,1]`:                "must be empty or a JSON object",
		`null`:                 "must be empty or a JSON object",
		`{"from":0} {}`:        "must be empty or a JSON object",
		`{"from":4}`:           "from 4 is past 3, the high watermark",
		`{"from":2,"to":1}`:    "from 2 is after to 1",
	} {
		st, out := l.call("POST", "/mmmq/dispatchers/gd/redrive", body)
		var e struct{ Error, Code string }
		if json.Unmarshal([]byte(out), &e); st != 400 || !strings.Contains(e.Error, says) || e.Code != "BAD_REQUEST" {
			t.Errorf("redrive %s: %d %s; want 400 saying %q", body, st, out, says)
		}
	}
	if n := len(l.entries("r.a")) + len(l.entries("r.b")); n != 3 {
		t.Fatalf("refused redrives published: %d messages in r.a and r.b, want 3", n)
	}

	// The first dead letter only.
	var res dispatcher.RedriveResult
	l.must("POST", "/mmmq/dispatchers/gd/redrive", `{"from":0,"to":1}`, 200, &res)
	first := dead[0]["headers"].(map[string]any)
	if res.DeadLetterTopic != "dead-letter.gd" || res.From != 0 || res.To != 1 || res.Next != 1 || len(res.Redriven) != 1 ||
		len(res.Skipped) != 0 || res.Redriven[0].Topic != first["mmmq-dl-topic"] {
		t.Fatalf("redrive [0,1): %+v", res)
	}
	again := l.entries(res.Redriven[0].Topic)
	if int64(len(again)) != res.Redriven[0].Offset+1 {
		t.Fatalf("redriven to offset %d of %s, which holds %d", res.Redriven[0].Offset, res.Redriven[0].Topic, len(again))
	}
	h := again[res.Redriven[0].Offset]["headers"].(map[string]any)
	if h[dispatcher.HeaderRedrivenFrom] != "dead-letter.gd/0" || h["k"] != "v" || h[dispatcher.HeaderDLTopic] != nil {
		t.Fatalf("redriven message headers: %v", h)
	}
	// The rest: no body.
	res = dispatcher.RedriveResult{}
	l.must("POST", "/mmmq/dispatchers/gd/redrive", "", 200, &res)
	if res.From != 0 || res.To != 3 || res.Next != 3 || len(res.Redriven) != 3 {
		t.Fatalf("redrive everything: %+v", res)
	}
	if n := len(l.entries("r.a")) + len(l.entries("r.b")); n != 3+1+3 {
		t.Fatalf("after the redrives r.a and r.b hold %d messages, want 7", n)
	}

	st2, out := l.call("POST", "/mmmq/dispatchers/nope/redrive", "")
	if st2 != 404 || !strings.Contains(out, `"code":"NOT_FOUND"`) || !strings.Contains(out, "nope") {
		t.Errorf("unknown dispatcher: %d %s", st2, out)
	}
	off := fmt.Sprintf(`{"name":"off","host":%q,"patterns":["none.*"],"dead-letter":""}`, nack.URL)
	var created Listed
	l.must("POST", "/mmmq/dispatchers", off, 201, &created)
	if created.DeadLetter == nil || *created.DeadLetter != "" {
		t.Fatalf("created with dead letters off: %+v", created.Spec)
	}
	if st := l.waitStatus("off", func(Status) bool { return true }); st.DeadLetterTopic != "" {
		t.Fatalf("dead letters off: status %+v", st)
	}
	st2, out = l.call("POST", "/mmmq/dispatchers/off/redrive", "")
	if st2 != 409 || !strings.Contains(out, `"code":"NO_DEAD_LETTERS"`) {
		t.Errorf("dead letters off: %d %s", st2, out)
	}
	// A dead-letter topic that does not exist yet has nothing to redrive.
	l.must("POST", "/mmmq/dispatchers", fmt.Sprintf(`{"name":"fresh","host":%q,"patterns":["none.*"]}`, nack.URL), 201, nil)
	res = dispatcher.RedriveResult{}
	l.must("POST", "/mmmq/dispatchers/fresh/redrive", "{}", 200, &res)
	if res.DeadLetterTopic != "dead-letter.fresh" || res.To != 0 || len(res.Redriven) != 0 {
		t.Fatalf("nothing to redrive: %+v", res)
	}
}
