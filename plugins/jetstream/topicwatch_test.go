package jetstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/contract"
)

// watchEvents starts b's topic watch into a channel, stopped at cleanup.
func watchEvents(t *testing.T, b *Backend) <-chan contract.TopicEvent {
	t.Helper()
	events := make(chan contract.TopicEvent, 1024)
	stop, err := b.WatchTopics(func(ev contract.TopicEvent) { events <- ev })
	require.NoError(t, err)
	t.Cleanup(stop)
	return events
}

// awaitEvent returns the first event want accepts within 10 s, skipping
// the others (listings repeat topics).
func awaitEvent(t *testing.T, events <-chan contract.TopicEvent, what string, want func(contract.TopicEvent) bool) contract.TopicEvent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if want(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s reported within 10s", what)
		}
	}
}

// openOn opens topic through b as its registry would (not closed at
// cleanup: the test closes it, or the stream is deleted under it).
func openOn(t *testing.T, b *Backend, topic string, create bool) *Log {
	t.Helper()
	l, err := b.Open(topic, create)
	require.NoError(t, err)
	return l.(*Log)
}

// Two brokers on one server: a topic deleted through a is reported
// deleted by b's watch, with the incarnation b has open; a topic created
// again through a is reported created with its new incarnation. Long topic
// names (hashed stream names) map back too. The nats-server drops some
// stream-deleted advisories (see topicRelist's users), so the listing is
// part of the path here, every 2 s; the advisory handler alone is
// TestWatchTopicsAdvisoryReportsDeletion.
func TestWatchTopicsReportsDeletionsAcrossBrokers(t *testing.T) {
	was := topicRelist
	topicRelist = 2 * time.Second
	t.Cleanup(func() { topicRelist = was })
	s := startServer(t)
	a, b := connect(t, s), connect(t, s)
	events := watchEvents(t, b)
	long := "h" + strings.Repeat("-", 130) // its stream name is hashed
	_, hashed, _ := DecodeStreamName(b.cfg.StreamPrefix, StreamName(b.cfg.StreamPrefix, long))
	require.True(t, hashed)

	for _, topic := range []string{"del.topic", long} {
		la := openOn(t, a, topic, true)
		awaitEvent(t, events, "creation of "+topic, func(ev contract.TopicEvent) bool {
			return ev.Name == topic && !ev.Deleted && ev.Incarnation == la.Incarnation()
		})
		lb := openOn(t, b, topic, false) // b's registry opens it
		require.NoError(t, la.Close())
		_, err := a.Delete(topic)
		require.NoError(t, err)
		awaitEvent(t, events, "deletion of "+topic, func(ev contract.TopicEvent) bool {
			return ev.Name == topic && ev.Deleted && ev.Incarnation == lb.Incarnation()
		})
		require.NoError(t, lb.Close())

		again := openOn(t, a, topic, true)
		require.NotEqual(t, la.Incarnation(), again.Incarnation())
		awaitEvent(t, events, "re-creation of "+topic, func(ev contract.TopicEvent) bool {
			return ev.Name == topic && !ev.Deleted && ev.Incarnation == again.Incarnation()
		})
		require.NoError(t, again.Close())
	}
}

// Deletions whose advisories were missed are found by the listing: a
// topic deleted and created again through a is reported deleted (the
// incarnation b has open), then created (the new one); a topic deleted
// for good is reported deleted once a lookup confirms it; a live topic is
// never reported deleted.
func TestWatchTopicsListingFindsMissedDeletions(t *testing.T) {
	s := startServer(t)
	a, b := connect(t, s), connect(t, s)
	var got []contract.TopicEvent
	w := &topicWatch{b: b, reported: map[string]string{}, fn: func(ev contract.TopicEvent) { got = append(got, ev) }}
	ctx := context.Background()

	for _, topic := range []string{"replaced", "gone", "live"} {
		require.NoError(t, openOn(t, a, topic, true).Close())
	}
	old := openOn(t, b, "replaced", false)
	defer old.Close()
	w.list(ctx)
	require.Len(t, got, 3)
	for _, ev := range got {
		require.False(t, ev.Deleted, "%+v", ev)
	}

	for _, topic := range []string{"replaced", "gone"} {
		_, err := a.Delete(topic)
		require.NoError(t, err)
	}
	again := openOn(t, a, "replaced", true)
	defer again.Close()
	got = nil
	w.list(ctx)
	var deleted []contract.TopicEvent
	replacedAt, recreatedAt := -1, -1
	for i, ev := range got {
		switch {
		case ev.Deleted:
			deleted = append(deleted, ev)
			if ev.Name == "replaced" {
				replacedAt = i
			}
		case ev.Name == "replaced":
			recreatedAt = i
			require.Equal(t, again.Incarnation(), ev.Incarnation)
		}
	}
	require.ElementsMatch(t, []contract.TopicEvent{
		{Name: "replaced", Deleted: true, Incarnation: old.Incarnation()},
		{Name: "gone", Deleted: true},
	}, deleted)
	require.True(t, replacedAt >= 0 && replacedAt < recreatedAt, "replaced: deleted at %d, created at %d", replacedAt, recreatedAt)

	got = nil
	w.list(ctx) // nothing changed: nothing deleted
	for _, ev := range got {
		require.False(t, ev.Deleted, "%+v", ev)
	}
}

// The stream-deleted advisory's handler alone: a topic deleted through
// another broker is reported deleted with the incarnation open here, also
// for a hashed stream name this broker opened but never saw listed; an
// advisory for a stream that still exists in the incarnation open here
// reports nothing.
func TestWatchTopicsAdvisoryReportsDeletion(t *testing.T) {
	s := startServer(t)
	a, b := connect(t, s), connect(t, s)
	var got []contract.TopicEvent
	w := &topicWatch{b: b, reported: map[string]string{}, fn: func(ev contract.TopicEvent) { got = append(got, ev) }}
	ctx := context.Background()
	long := "h" + strings.Repeat("-", 130)
	for _, topic := range []string{"adv.topic", long} {
		got = nil
		require.NoError(t, openOn(t, a, topic, true).Close())
		lb := openOn(t, b, topic, false)
		sname := StreamName(b.cfg.StreamPrefix, topic)
		w.streamDeleted(ctx, sname) // still there: a late advisory
		require.Empty(t, got, topic)
		_, err := a.Delete(topic)
		require.NoError(t, err)
		w.streamDeleted(ctx, sname)
		require.Equal(t, []contract.TopicEvent{{Name: topic, Deleted: true, Incarnation: lb.Incarnation()}}, got, topic)
		require.NoError(t, lb.Close())
	}
}

// A topic deleted and created again through this broker is not reported
// deleted by the late advisory of its first deletion: the stream open
// here is the new one.
func TestWatchTopicsIgnoresOwnRecreation(t *testing.T) {
	b := connect(t, startServer(t))
	var got []contract.TopicEvent
	w := &topicWatch{b: b, reported: map[string]string{}, fn: func(ev contract.TopicEvent) { got = append(got, ev) }}
	l := openOn(t, b, "mine", true)
	require.NoError(t, l.Close())
	_, err := b.Delete("mine")
	require.NoError(t, err)
	again := openOn(t, b, "mine", true)
	defer again.Close()
	w.streamDeleted(context.Background(), StreamName(b.cfg.StreamPrefix, "mine"))
	require.Empty(t, got)
}
