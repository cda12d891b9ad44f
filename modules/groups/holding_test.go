package groups

import (
	"testing"
	"time"
)

// Holding (retention's keep-unconsumed) counts a group that committed or
// fetched within group-idle, and only groups used since the coordinator
// (the broker) started: a group idle since then holds nothing until a
// consumer fetches or commits again.
func TestHoldingCountsFetchesAndCommits(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(5)
	s := e.acquire("g")
	g := e.c.groups[key{testTopic, "g"}]
	since := time.Now()
	idle := func() { g.active.Store(since.Add(-time.Hour).UnixNano()) }

	idle()
	if off, ok := e.c.Holding(testTopic, since); ok {
		t.Fatalf("a group idle for an hour holds offset %d", off)
	}
	b := e.fetch("g", s, 2, 0)
	b.Release()
	if off, ok := e.c.Holding(testTopic, since); !ok || off != 0 {
		t.Fatalf("after a fetch: holding %d, %v; want offset 0 held (a fetch is activity)", off, ok)
	}
	idle()
	if _, err := e.c.Ack(testTopic, "g", s, 1); err != nil {
		t.Fatal(err)
	}
	if off, ok := e.c.Holding(testTopic, since); !ok || off != 2 {
		t.Fatalf("after a commit: holding %d, %v; want offset 2 held", off, ok)
	}
	// HoldingGroup names it: the group furthest behind (first by name on a tie).
	e.acquire("a-behind")
	if name, off, ok := e.c.HoldingGroup(testTopic, since); !ok || name != "a-behind" || off != 0 {
		t.Fatalf("HoldingGroup = %q %d %v, want a-behind at 0", name, off, ok)
	}
	e.acquire("0-also-behind")
	if name, _, _ := e.c.HoldingGroup(testTopic, since); name != "0-also-behind" {
		t.Fatalf("HoldingGroup = %q on a tie at 0, want the first by name", name)
	}

	// A restart: the committed group is on disk but unused since, so it
	// holds nothing until a consumer uses it again.
	e.reopen()
	if off, ok := e.c.Holding(testTopic, time.Time{}); ok {
		t.Fatalf("a group unused since the start holds offset %d", off)
	}
	s = e.acquire("g")
	b = e.fetch("g", s, 1, 0)
	b.Release()
	if off, ok := e.c.Holding(testTopic, since); !ok || off != 2 {
		t.Fatalf("used again after the restart: holding %d, %v; want offset 2", off, ok)
	}
}
