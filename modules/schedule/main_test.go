package schedule

import (
	"context"
	"fmt"
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
// returns); fail, when set, makes Append fail.
type recTarget struct {
	mu   sync.Mutex
	now  func() time.Time
	got  []delivery
	fail error
}

func (t *recTarget) Append(_ context.Context, topic string, stored []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fail != nil {
		return t.fail
	}
	t.got = append(t.got, delivery{topic: topic, stored: string(stored), at: t.now()})
	return nil
}

func (t *recTarget) deliveries() []delivery {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]delivery(nil), t.got...)
}

func msg(i int) []byte { return []byte(fmt.Sprintf(`{"n":%d}`, i)) }
