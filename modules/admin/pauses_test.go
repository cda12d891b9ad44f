package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// startPausing is startAdmin with paused.json in dir: the pauses are
// restored before the Manager starts, as Module does. stop stops both.
func startPausing(t *testing.T, reg *topicqueue.Registry, dir string, ds ...*dispatcher.Dispatcher) (l *liveAdmin, stop func()) {
	t.Helper()
	log := zaptest.NewLogger(t)
	set, err := dispatcher.SetOf(ds...)
	if err != nil {
		t.Fatal(err)
	}
	opts := dispatcher.Options{BackoffInitial: time.Millisecond, BackoffMax: 5 * time.Millisecond}
	sender := dispatcher.NewHTTPSender(opts)
	m := dispatcher.NewManager(set, dispatcher.RegistrySource(reg), sender, opts, log)
	a := New(m, set, NewStore(vfs.OS{}, dir), Options{Defaults: dispatcher.ConfigSection.Default(), Logger: log, Pauses: NewPauseFile(vfs.OS{}, dir)})
	if err := a.RestorePauses(); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	NewRoute(a).Register(r)
	srv := httptest.NewServer(r)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			srv.Close()
			_ = a.Stop()
			m.Stop(context.Background())
			sender.CloseIdleConnections()
		})
	}
	t.Cleanup(stop)
	return &liveAdmin{t: t, reg: reg, m: m, a: a, dir: dir, base: srv.URL}, stop
}

// pause-after 1s with a dead consumer: a dispatcher declared in Go and
// one created through the API both pause themselves (paused, pauseReason
// auto, pausedAt), nothing committed; a third, paused through the API, has
// reason admin. All three pauses are in paused.json and survive a restart
// (Manager and Admin made again on the same data root) with their reasons
// and times, and nothing is pushed to the consumer, now back, meanwhile.
// A resume removes the record and delivers every message once, in order.
func TestAutoPauseSurvivesRestartAndResumeDelivers(t *testing.T) {
	var up atomic.Bool
	var mu sync.Mutex
	got := map[string][]string{} // by dispatcher (each pushes to /<its name>): the contents ACKed
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		name := strings.TrimPrefix(r.URL.Path, "/")
		got[name] = append(got[name], string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"acknowledgement":"ACK"}`)
	}))
	t.Cleanup(srv.Close)
	host, err := dispatcher.ParseHost(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	declared := func() []*dispatcher.Dispatcher {
		return []*dispatcher.Dispatcher{
			dispatcher.New("go-d", host, dispatcher.MustPattern("s.*")).WithPath("/go-d").WithPauseAfter(time.Second),
			dispatcher.New("manual", host, dispatcher.MustPattern("s.*")).WithPath("/manual"),
		}
	}
	reg, dir := newRegistry(t), t.TempDir()
	l, stop := startPausing(t, reg, dir, declared()...)
	l.must("POST", "/mmmq/dispatchers", fmt.Sprintf(`{"name":"api-d","host":%q,"path":"/api-d","patterns":["s.*"],"pause-after":"1s"}`, srv.URL), 201, nil)
	l.must("POST", "/mmmq/dispatchers/manual/pause", "", 200, nil)
	l.publish("s.a", 5)
	before := map[string]Status{}
	for _, n := range []string{"go-d", "api-d"} {
		before[n] = l.waitStatus(n, func(st Status) bool { return st.Paused && st.PauseReason == dispatcher.PauseAuto })
		if st := before[n]; st.PausedAt == nil || len(st.Topics) != 1 || st.Topics[0].Committed != 0 {
			t.Fatalf("%s auto-paused: pausedAt %v, topics %+v; want a time and nothing committed", n, st.PausedAt, st.Topics)
		}
	}
	before["manual"] = l.waitStatus("manual", func(st Status) bool { return st.Paused && st.PauseReason == dispatcher.PauseAdmin })
	// The record is written before the pause applies (the pause hook):
	// once the status says paused, it is there.
	b, _ := os.ReadFile(filepath.Join(dir, "paused.json"))
	for _, want := range []string{`"name": "api-d"`, `"name": "go-d"`, `"name": "manual"`, `"reason": "auto"`, `"reason": "admin"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("paused.json has no %s:\n%s", want, b)
		}
	}
	stop()

	up.Store(true)
	l, _ = startPausing(t, reg, dir, declared()...)
	for n, was := range before {
		st, err := l.a.Status(n)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Paused || st.PauseReason != was.PauseReason || st.PausedAt == nil || !st.PausedAt.Equal(*was.PausedAt) {
			t.Errorf("%s after the restart: paused %v, reason %q at %v; want paused, %q at %v", n, st.Paused, st.PauseReason, st.PausedAt, was.PauseReason, was.PausedAt)
		}
	}
	time.Sleep(100 * time.Millisecond) // a dispatcher that forgot its pause would push now
	mu.Lock()
	if len(got) != 0 {
		t.Errorf("pushed while paused after the restart: %v", got)
	}
	mu.Unlock()

	for _, n := range []string{"go-d", "api-d", "manual"} {
		l.must("POST", "/mmmq/dispatchers/"+n+"/resume", "", 200, nil)
		st := l.waitStatus(n, func(st Status) bool { return len(st.Topics) == 1 && st.Topics[0].Committed == 5 })
		if st.Paused || st.PauseReason != "" || st.PausedAt != nil {
			t.Errorf("%s resumed: paused %v, reason %q, at %v", n, st.Paused, st.PauseReason, st.PausedAt)
		}
		mu.Lock()
		if len(got[n]) != 5 {
			t.Errorf("%s: %d pushes ACKed, want 5 (one per message)", n, len(got[n]))
		}
		for i, body := range got[n] {
			if !strings.Contains(body, fmt.Sprintf(`"content":{"i":%d}`, i)) {
				t.Errorf("%s: push %d is %s, want content %d (in order)", n, i, body, i)
			}
		}
		mu.Unlock()
	}
	if b, err := os.ReadFile(filepath.Join(dir, "paused.json")); err != nil || strings.Contains(string(b), `"name"`) {
		t.Errorf("paused.json after the resumes: %s (%v), want no record", b, err)
	}
}

// A power loss at any file-system operation of PauseFile.Save (each
// simulated by dropping whatever was not fsynced) leaves the old record or
// the new one, never an error or an empty file; after Save returns, the
// new one.
func TestPauseFileSavePowerLoss(t *testing.T) {
	at := time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC)
	a := map[string]PauseRecord{"a": {Name: "a", Reason: dispatcher.PauseAdmin, At: at}}
	b := map[string]PauseRecord{"a": {Name: "a", Reason: dispatcher.PauseAdmin, At: at}, "b": {Name: "b", Reason: dispatcher.PauseAuto, At: at}}
	for _, tc := range []struct {
		name     string
		old, new map[string]PauseRecord // old nil: no file before the save
	}{
		{"first save", nil, a},
		{"replace", a, b},
		{"shrink", b, a},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memDataRoot(t)
			p := NewPauseFile(mem, "/data")
			if tc.old != nil {
				if err := p.Save(tc.old); err != nil {
					t.Fatal(err)
				}
			}
			crashes, ops := crashPoints(t, mem, func() error { return p.Save(tc.new) })
			old := tc.old
			if old == nil {
				old = map[string]PauseRecord{}
			}
			check := func(c *vfs.MemFS, when string, want ...map[string]PauseRecord) {
				t.Helper()
				got, err := NewPauseFile(c, "/data").Load()
				if err != nil {
					t.Fatalf("power loss %s: Load: %v", when, err)
				}
				for _, w := range want {
					if reflect.DeepEqual(got, w) {
						return
					}
				}
				t.Fatalf("power loss %s: loaded %+v, want one of %+v", when, got, want)
			}
			for i, c := range crashes {
				check(c, ops[i], old, tc.new)
			}
			check(mem.Crash(vfs.CrashOptions{}), "after Save returned", tc.new)
		})
	}
}

// The pause hook stores no automatic pause the Manager no longer has
// pending: a pause, resume or delete cancelled it, and stored its own
// record first (under the same lock), so a late hook call must not leave
// a record that pauses the dispatcher again at the next start.
func TestAutoPauseHookStoresNoCancelledPause(t *testing.T) {
	host, err := dispatcher.ParseHost("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	set, err := dispatcher.SetOf(dispatcher.New("d", host, dispatcher.MustPattern("s.*")).WithPauseAfter(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	opts := dispatcher.Options{}
	m := dispatcher.NewManager(set, dispatcher.RegistrySource(newRegistry(t)), dispatcher.NewHTTPSender(opts), opts, nil)
	dir := t.TempDir()
	a := New(m, set, NewStore(vfs.OS{}, dir), Options{Defaults: dispatcher.ConfigSection.Default(), Logger: zaptest.NewLogger(t), Pauses: NewPauseFile(vfs.OS{}, dir)})
	if err := a.RestorePauses(); err != nil {
		t.Fatal(err)
	}
	if _, pending := m.PausePending("d"); pending {
		t.Fatal("a pause pending on a Manager that never ran")
	}
	a.autoPaused("d", dispatcher.PauseInfo{Reason: dispatcher.PauseAuto, At: time.Now()})
	recs, err := NewPauseFile(vfs.OS{}, dir).Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 {
		t.Errorf("paused.json %v after the hook for a pause not pending, want no record", recs)
	}
	if m.Paused("d") {
		t.Error("d paused")
	}
}
