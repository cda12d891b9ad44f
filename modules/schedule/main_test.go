package schedule

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// delivery is one Append a recTarget saw.
type delivery struct {
	topic  string
	stored string
	at     time.Time // the clock when it was appended
}

// recTarget records every Append (a topic that is durable once Append
// returns); fail, when set, makes Append fail. It is a Ledger (its topics
// are the messages appended, in order) and a TopicDeleter.
type recTarget struct {
	mu   sync.Mutex
	now  func() time.Time
	got  []delivery
	fail error
	// failTopic makes the appends of one topic fail.
	failTopic map[string]error
	topics    map[string][]string // topic → messages as appended (with the header)
	deleted   map[string]int      // topic → times deleted
}

func (t *recTarget) Append(_ context.Context, topic string, stored []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fail != nil {
		return t.fail
	}
	if err := t.failTopic[topic]; err != nil {
		return err
	}
	if t.topics == nil {
		t.topics = map[string][]string{}
	}
	t.topics[topic] = append(t.topics[topic], string(stored))
	t.got = append(t.got, delivery{topic: topic, stored: stripScheduleID(string(stored)), at: t.now()})
	return nil
}

// stripScheduleID undoes withScheduleID on a message without headers.
func stripScheduleID(s string) string {
	if i := strings.Index(s, `,"headers":{"`+HeaderScheduleID+`":`); i >= 0 && strings.HasSuffix(s, "}}") {
		return s[:i] + "}"
	}
	return s
}

func (t *recTarget) HighWatermark(topic string) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int64(len(t.topics[topic])), nil
}

func (t *recTarget) Find(_ context.Context, topic string, from int64, ids map[string]bool) (map[string]bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	found := map[string]bool{}
	for _, m := range t.topics[topic][min(from, int64(len(t.topics[topic]))):] {
		if id := scheduleIDOf([]byte(m)); ids[id] {
			found[id] = true
		}
	}
	return found, nil
}

func (t *recTarget) DeleteTopic(topic string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.topics, topic)
	if t.deleted == nil {
		t.deleted = map[string]int{}
	}
	t.deleted[topic]++
	return nil
}

// plainTarget is a Target only (no Ledger): the move is at least once.
type plainTarget struct{ rec *recTarget }

func (t plainTarget) Append(ctx context.Context, topic string, stored []byte) error {
	return t.rec.Append(ctx, topic, stored)
}

// stopAtEnd stops s when the test ends.
func stopAtEnd(t testing.TB, s *Scheduler) {
	t.Cleanup(func() { s.Stop(context.Background()) })
}

func (t *recTarget) deliveries() []delivery {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]delivery(nil), t.got...)
}

func msg(i int) []byte { return []byte(fmt.Sprintf(`{"n":%d}`, i)) }

// batchTarget is a recTarget that is also a BatchTarget: a run of one
// topic appended at once, all or nothing.
type batchTarget struct{ *recTarget }

func (t batchTarget) AppendBatch(ctx context.Context, topic string, stored [][]byte) error {
	t.mu.Lock()
	fail := cmp.Or(t.fail, t.failTopic[topic])
	t.mu.Unlock()
	if fail != nil {
		return fail
	}
	for _, m := range stored {
		if err := t.Append(ctx, topic, m); err != nil {
			return err
		}
	}
	return nil
}
