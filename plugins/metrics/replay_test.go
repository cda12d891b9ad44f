package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// TestReplaySeries: a seek with a rate shows, on each moved topic,
// mmmq_dispatch_replay_rate and mmmq_dispatch_replay_remaining (the
// target minus the checkpoint); a seek without a rate removes them; a
// dispatcher without one never has them.
func TestReplaySeries(t *testing.T) {
	reg, host := memRegistryAndConsumer(t, "ACK")
	mgr, scrape := watchedManager(t, reg, dispatcher.Options{},
		dispatcher.New("replayer", host, dispatcher.MustPattern("t.*")), dispatcher.New("other", host, dispatcher.MustPattern("t.*")))
	for range 3 {
		if _, _, err := reg.Publish(context.Background(), "t.a", [][]byte{[]byte(`{"topic":{"name":"t.a"},"content":1}`)}, contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	scrapedWith(t, scrape, `mmmq_dispatch_committed_offset{dispatcher="replayer",topic="t.a"} 3`)
	all := func(string) bool { return true }
	// One message per 1000 s: the first goes, two remain.
	if _, err := mgr.SeekAt("replayer", all, func(dispatcher.Topic) (int64, error) { return 0, nil }, 0.001); err != nil {
		t.Fatal(err)
	}
	s := scrapedWith(t, scrape, `mmmq_dispatch_replay_remaining{dispatcher="replayer",topic="t.a"} 2`,
		`mmmq_dispatch_replay_rate{dispatcher="replayer",topic="t.a"} 0.001`)
	if strings.Contains(s, `mmmq_dispatch_replay_rate{dispatcher="other"`) {
		t.Errorf("replay series for a dispatcher that was not sought:\n%s", s)
	}
	if _, err := mgr.SeekAt("replayer", all, func(dispatcher.Topic) (int64, error) { return 3, nil }, 0); err != nil {
		t.Fatal(err)
	}
	if s := scrape(); strings.Contains(s, "mmmq_dispatch_replay_") {
		t.Errorf("replay series after a seek without a rate:\n%s", s)
	}
}
