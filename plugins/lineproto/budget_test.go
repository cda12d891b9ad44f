package lineproto

import (
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
)

// TestOverloaded: FETCH and PUB ACCEPTED draw from the in-flight budget.
// A FETCH for which not one message fits is ERR OVERLOADED and delivers
// nothing; with room for one it returns one; PUB ACCEPTED over the budget
// is ERR OVERLOADED and stores nothing; the budget is back at 0 after.
func TestOverloaded(t *testing.T) {
	budget := contract.NewBudget(0) // cap set below, from a message's size
	e := start(t, Options{}, groups.Options{Budget: budget})
	c := e.dial(t)
	for i := 0; i < 3; i++ {
		expectPrefix(t, c.do(`PUB ov.t DURABLE {"p":"`+strings.Repeat("x", 200)+`"}`), "OK ")
	}
	q, _ := e.reg.Get("ov.t")
	es, err := q.ReadBatch(0, 1)
	if err != nil || len(es) != 1 {
		t.Fatal(es, err)
	}
	l := int64(len(es[0].Payload))
	*budget = *contract.NewBudget(5 * l / 2) // nothing taken yet: safe to replace

	if !budget.TryAcquire(2 * l) { // other replies in flight
		t.Fatal("acquire")
	}
	expectPrefix(t, c.do("FETCH ov.t g 10 0"), "ERR OVERLOADED ")
	expectPrefix(t, c.do(`PUB ov.t ACCEPTED {"p":"`+strings.Repeat("y", 200)+`"}`), "ERR OVERLOADED ")
	if hw := q.HighWatermark(); hw != 3 {
		t.Fatalf("high watermark %d: the OVERLOADED PUB stored something", hw)
	}
	budget.Release(l)
	if offs, _ := c.fetch("FETCH ov.t g 10 0"); len(offs) != 1 || offs[0] != 0 {
		t.Fatalf("fetch with room for one: %v", offs)
	}
	budget.Release(l)
	if offs, _ := c.fetch("FETCH ov.t g 10 0"); len(offs) != 2 || offs[0] != 1 {
		t.Fatalf("fetch after the release: %v", offs)
	}
	if budget.InUse() != 0 {
		t.Fatalf("budget holds %d after the replies", budget.InUse())
	}
	expectPrefix(t, c.do(`PUB ov.t ACCEPTED {"p":"z"}`), "OK - ACCEPTED")
	deadline := time.Now().Add(10 * time.Second)
	for budget.InUse() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("budget holds %d after the ACCEPTED write", budget.InUse())
		}
		time.Sleep(time.Millisecond)
	}
}
