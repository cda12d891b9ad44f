package metrics

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// TestDeadLetteredSeries: a message the consumer NACKs on every attempt is
// counted in mmmq_dispatch_exhausted_total and, once appended to the
// dead-letter topic, in mmmq_dispatch_dead_lettered_total; a dispatcher
// whose dead letters are off counts it as exhausted only. The help texts
// say so.
func TestDeadLetteredSeries(t *testing.T) {
	reg, host := memRegistryAndConsumer(t, "NACK")
	set, err := dispatcher.SetOf(dispatcher.New("d", host, dispatcher.MustPattern("t")),
		dispatcher.New("off", host, dispatcher.MustPattern("t")).WithDeadLetter(""))
	if err != nil {
		t.Fatal(err)
	}
	opts := dispatcher.Options{}.WithMaxResends(0)
	sender := dispatcher.NewHTTPSender(opts)
	defer sender.CloseIdleConnections()
	mgr := dispatcher.NewManager(set, dispatcher.RegistrySource(reg), sender, opts, zaptest.NewLogger(t))
	mgr.SetPublisher(dispatcher.RegistryPublisher(reg))
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer mgr.Stop(context.Background())
	m := New()
	m.WatchDispatchers(mgr, reg)
	for range 2 {
		if _, _, err := reg.Publish(context.Background(), "t", [][]byte{[]byte(`{"topic":{"name":"t"},"content":1}`)}, contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	scrape := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	want := []string{
		`mmmq_dispatch_exhausted_total{dispatcher="d",topic="t"} 2`,
		`mmmq_dispatch_dead_lettered_total{dispatcher="d",topic="t"} 2`,
		`mmmq_dispatch_exhausted_total{dispatcher="off",topic="t"} 2`,
		`mmmq_dispatch_dead_lettered_total{dispatcher="off",topic="t"} 0`,
		"# HELP mmmq_dispatch_exhausted_total Messages given up on: NACKed on every attempt (1 + mmmq.broker.dispatch.max-resends, by default 4) or past the abnormal limit; dead-lettered unless dead letters are off.",
		"# HELP mmmq_dispatch_dead_lettered_total Exhausted messages appended to the dispatcher's dead-letter topic",
		"# TYPE mmmq_dispatch_dead_lettered_total counter",
	}
	var s string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s = scrape()
		missing := ""
		for _, w := range want {
			if !strings.Contains(s, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in:\n%s", missing, s)
		}
	}
}

// TestDeadLetterBytesSeries: mmmq_dead_letter_bytes is the sum of the
// dead-letter topics' bytes, ordinary topics left out.
func TestDeadLetterBytesSeries(t *testing.T) {
	reg := topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: vfs.NewMem(), Logger: zaptest.NewLogger(t)}})
	defer reg.Close()
	var want int64
	for _, topic := range []string{"dead-letter.a", "dead-letter.b", "order.new"} {
		if _, _, err := reg.Publish(context.Background(), topic, [][]byte{[]byte(`{"topic":{"name":"` + topic + `"},"content":1}`)}, contract.Durable); err != nil {
			t.Fatal(err)
		}
		if q, ok := reg.Get(topic); ok && strings.HasPrefix(topic, "dead-letter.") {
			want += q.Stats().Bytes
		}
	}
	m := New()
	m.WatchTopics(reg)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if line := fmt.Sprintf("mmmq_dead_letter_bytes %d\n", want); want == 0 || !strings.Contains(rec.Body.String(), line) {
		t.Errorf("scrape lacks %q (want > 0):\n%s", line, rec.Body.String())
	}
}
