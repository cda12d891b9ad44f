package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// TestDeletedTopicLeavesNoSeries: per-topic and per-worker series are read
// from the registry and the dispatch manager at scrape time, so a deleted
// topic has none left.
func TestDeletedTopicLeavesNoSeries(t *testing.T) {
	reg, host := memRegistryAndConsumer(t, "ACK")
	set, err := dispatcher.SetOf(dispatcher.New("d", host, dispatcher.MustPattern("gone")))
	if err != nil {
		t.Fatal(err)
	}
	sender := dispatcher.NewHTTPSender(dispatcher.Options{})
	defer sender.CloseIdleConnections()
	mgr := dispatcher.NewManager(set, dispatcher.RegistrySource(reg), sender, dispatcher.Options{}, zaptest.NewLogger(t))
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer mgr.Stop(context.Background())
	m := New()
	m.WatchTopics(reg)
	m.WatchDispatchers(mgr, reg)
	for _, topic := range []string{"gone", "kept"} {
		if _, _, err := reg.Publish(context.Background(), topic, [][]byte{[]byte(`{"topic":{"name":"` + topic + `"},"content":1}`)}, contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	scrape := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	if s := scrape(); !strings.Contains(s, `mmmq_topic_next_offset{topic="gone"} 1`) || !strings.Contains(s, `mmmq_dispatch_lag{dispatcher="d",topic="gone"}`) {
		t.Fatalf("before the deletion the topic and its worker are not scraped:\n%s", s)
	}
	if err := reg.Delete("gone"); err != nil {
		t.Fatal(err)
	}
	s := scrape()
	if strings.Contains(s, `topic="gone"`) {
		t.Fatalf("series of the deleted topic still scraped:\n%s", s)
	}
	if !strings.Contains(s, `mmmq_topic_next_offset{topic="kept"} 1`) {
		t.Fatalf("the other topic is no longer scraped:\n%s", s)
	}
}
