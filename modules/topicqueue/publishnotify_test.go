package topicqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestPublishMessagesNotifyKeepsCallOrder: calls made one after another
// without waiting get offsets in call order (PUBs pipelined on one
// connection rely on it); each done is called once, after out is filled;
// a producer id repeated by a later call is its duplicate; the topic
// holds the messages in call order.
func TestPublishMessagesNotifyKeepsCallOrder(t *testing.T) {
	e := newDedupEnv(t, vfs.NewMem())
	const n = 200
	outs := make([][1]Published, n)
	calls := make([]atomic.Int32, n)
	errs := make(chan error, n)
	var want []string
	for i := range n {
		id := ""
		switch {
		case i%50 == 49:
			id = "id-3" // a duplicate of call 3
		case i%3 == 0:
			id = fmt.Sprintf("id-%d", i)
		}
		m := msg(t, "t", id, fmt.Sprint(i))
		done := func(err error) {
			calls[i].Add(1)
			errs <- err
		}
		if _, err := e.reg.PublishMessagesNotify(context.Background(), "t", []Message{m}, contract.Durable, outs[i][:], done); err != nil {
			t.Fatalf("call %d refused: %v", i, err)
		}
		if id != "id-3" || i == 3 {
			want = append(want, fmt.Sprint(i))
		}
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	next := int64(0)
	for i := range n {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("done of call %d called %d times", i, c)
		}
		got := outs[i][0]
		if i%50 == 49 {
			if got != (Published{Offset: outs[3][0].Offset, Duplicate: true}) {
				t.Fatalf("call %d (id of call 3): %+v, want the duplicate of %+v", i, got, outs[3][0])
			}
			continue
		}
		if got != (Published{Offset: next}) {
			t.Fatalf("call %d: %+v, want offset %d", i, got, next)
		}
		next++
	}
	if got, w := strings.Join(e.contents("t"), ","), strings.Join(want, ","); got != w {
		t.Fatalf("topic holds %s, want %s", got, w)
	}
}

// TestPublishNotifyRefusedAndAccepted: a refused publish returns its error
// and never calls done (an invalid topic, a message over the record
// size); at ACCEPTED done has been called when PublishMessagesNotify
// returns, with the offset -1.
func TestPublishNotifyRefusedAndAccepted(t *testing.T) {
	e := newDedupEnv(t, vfs.NewMem())
	called := false
	done := func(error) { called = true }
	out := make([]Published, 1)
	if _, err := e.reg.PublishMessagesNotify(context.Background(), "bad name", []Message{msg(t, "t", "", "1")}, contract.Durable, out, done); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("invalid topic: %v", err)
	}
	big := msg(t, "t", "big", `"`+strings.Repeat("x", 2<<20)+`"`)
	if _, err := e.reg.PublishMessagesNotify(context.Background(), "t", []Message{big}, contract.Durable, out, done); !errors.Is(err, contract.ErrRecordTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	if called {
		t.Fatal("done called for a refused publish")
	}
	var doneErr error
	done = func(err error) { called, doneErr = true, err }
	if _, err := e.reg.PublishMessagesNotify(context.Background(), "t", []Message{msg(t, "t", "big", "2")}, contract.Accepted, out, done); err != nil {
		t.Fatal(err)
	}
	if !called || doneErr != nil || out[0] != (Published{Offset: -1}) {
		t.Fatalf("ACCEPTED: done called %v (%v), out %+v", called, doneErr, out[0])
	}
	// The id refused as too large was not remembered: stored now.
	if got := e.publish("t", contract.Durable, msg(t, "t", "big", "3")); got[0] != (Published{Offset: 0, Duplicate: true}) {
		t.Fatalf("the ACCEPTED id published again: %+v, want a duplicate of offset 0", got[0])
	}
}
