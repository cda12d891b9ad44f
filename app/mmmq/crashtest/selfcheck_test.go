package crashtest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestCheckersCatchViolations feeds the checks of the kill -9 harness
// histories that break each promise and requires every one to be reported:
// the harness can fail.
func TestCheckersCatchViolations(t *testing.T) {
	msg := func(topic, id string) stored {
		s, err := parseStored([]byte(`{"topic":{"name":"` + topic + `"},"content":{"id":"` + id + `"},"id":"` + id + `","timestamp":1}`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sent := func(id, level string, off int64) sentMsg {
		return sentMsg{Topic: "t", ID: id, Level: level, Content: []byte(`{"id":"` + id + `"}`),
			Res: pubResult{Replied: true, Ack: true, Offset: off}}
	}
	// retry is a retrying producer's publish of id: its attempt-th, with
	// no reply (off < 0) or an ACK at off (dup: "duplicate": true).
	retry := func(id string, attempt int, off int64, dup bool) sentMsg {
		m := sent(id, "durable", off)
		m.Retrying, m.Attempt = true, attempt
		if off < 0 {
			m.Res = pubResult{Offset: -1}
		}
		m.Res.Duplicate = dup
		return m
	}
	log3 := map[string][]stored{"t": {msg("t", "a"), msg("t", "b"), msg("t", "c")}}
	k := wkey{"d", "t"}
	del := func(round int, off int64, id string) delivery {
		return delivery{Round: round, Dispatcher: "d", Topic: "t", Offset: off, ID: id, Body: log3["t"][off].Raw, Acked: true}
	}
	// wdel is a delivery of the window dispatcher "w" (nack: answered
	// NACK).
	wk := wkey{"w", "t"}
	wdel := func(round int, off int64, nack bool) delivery {
		d := del(round, off, log3["t"][off].ID)
		d.Dispatcher, d.Acked = "w", !nack
		return d
	}
	win := map[string]bool{"w": true}
	// dl is a dead letter in dead-letter.d of t@1 (id b) with the given
	// id and attempts.
	dl := func(id, attempts string) stored {
		s, err := parseStored([]byte(`{"topic":{"name":"dead-letter.d"},"content":{"id":"b"},"id":"` + id + `","timestamp":1,"headers":{` +
			`"mmmq-dl-topic":"t","mmmq-dl-offset":"1","mmmq-dl-attempts":"` + attempts + `","mmmq-dl-reason":"nack-exhausted",` +
			`"mmmq-dl-original-id":"b","mmmq-dl-dispatcher":"d","mmmq-dl-last-status":"200"}}`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := []struct {
		name string
		run  func(tl *tally) []string
		want string
	}{
		{"durable lost", func(tl *tally) []string {
			return checkAcked([]sentMsg{sent("d", "durable", 3)}, log3, tl)
		}, "beyond the high watermark"},
		{"durable at another offset", func(tl *tally) []string {
			return checkAcked([]sentMsg{sent("b", "durable", 0)}, log3, tl)
		}, "holds id"},
		{"written lost", func(tl *tally) []string {
			return checkAcked([]sentMsg{sent("w", "written", 7)}, log3, tl)
		}, "written-acknowledged"},
		{"visible offset changed", func(*tally) []string {
			return checkPrefix(log3, map[string][]stored{"t": {msg("t", "a"), msg("t", "x"), msg("t", "c")}})
		}, "changed"},
		{"high watermark went back", func(*tally) []string {
			return checkPrefix(log3, map[string][]stored{"t": {msg("t", "a")}})
		}, "went back"},
		{"duplicate id in log", func(*tally) []string {
			return checkLogIDs([]sentMsg{sent("a", "durable", 0)}, map[string][]stored{"t": {msg("t", "a"), msg("t", "a")}})
		}, "stored twice"},
		{"unknown id in log", func(*tally) []string {
			return checkLogIDs(nil, log3)
		}, "never sent"},
		{"delivered beyond the high watermark", func(tl *tally) []string {
			d := del(1, 2, "c")
			d.Offset = 5
			return checkDeliveries([]delivery{del(1, 0, "a"), del(1, 1, "b"), del(1, 2, "c"), d}, log3, nil, nil, nil, tl)
		}, "beyond the high watermark"},
		{"delivered other bytes", func(tl *tally) []string {
			d := del(1, 0, "a")
			d.Body = []byte(`{}`)
			return checkDeliveries([]delivery{d}, log3, nil, nil, nil, tl)
		}, "but the log holds"},
		{"gap within a run", func(tl *tally) []string {
			return checkDeliveries([]delivery{del(1, 0, "a"), del(1, 2, "c")}, log3, nil, nil, nil, tl)
		}, "out of order or gap"},
		{"resume not at the checkpoint", func(tl *tally) []string {
			return checkDeliveries([]delivery{del(1, 0, "a"), del(1, 1, "b"), del(2, 0, "a")}, log3,
				map[int]map[wkey]int64{2: {k: 1}}, map[int]map[wkey]int64{1: {k: 1}}, nil, tl)
		}, "resumed at offset 0"},
		{"gap across a restart", func(tl *tally) []string {
			return checkDeliveries([]delivery{del(1, 0, "a"), del(2, 2, "c")}, log3,
				map[int]map[wkey]int64{2: {k: 2}}, nil, nil, tl)
		}, "gap"},
		{"checkpoint behind the consumer", func(tl *tally) []string {
			return checkDeliveries([]delivery{del(1, 0, "a"), del(1, 1, "b"), del(1, 2, "c")}, log3,
				nil, map[int]map[wkey]int64{1: {k: 1}}, nil, tl)
		}, "killed with checkpoint 1"},
		{"interval checkpoint past the consumer", func(tl *tally) []string {
			return checkDeliveries([]delivery{del(1, 0, "a")}, log3,
				nil, map[int]map[wkey]int64{1: {k: 3}}, map[wkey]bool{k: true}, tl)
		}, "killed with checkpoint 3"},
		{"never delivered", func(*tally) []string {
			return checkComplete([]delivery{del(1, 0, "a")}, log3, []wkey{k})
		}, "never delivered"},
		{"retry stored twice", func(*tally) []string {
			return checkRetries([]sentMsg{retry("a", 1, -1, false), retry("a", 2, 1, false)},
				map[string][]stored{"t": {msg("t", "a"), msg("t", "a")}}, false, &retryTally{})
		}, "stored 2 times"},
		{"duplicate answer at another offset", func(*tally) []string {
			return checkRetries([]sentMsg{retry("b", 1, -1, false), retry("b", 2, 0, true)}, log3, false, &retryTally{})
		}, "answered duplicate at t@0"},
		{"retry never acknowledged", func(*tally) []string {
			return checkRetries([]sentMsg{retry("c", 1, -1, false), retry("c", 2, -1, false)}, log3, true, &retryTally{})
		}, "never acknowledged"},
		{"retried id not in the log", func(*tally) []string {
			return checkRetries([]sentMsg{retry("x", 1, -1, false)}, log3, true, &retryTally{})
		}, "not in the log"},
		{"NACKed only, never ACKed", func(*tally) []string {
			d := del(1, 1, "b")
			d.Acked = false
			return checkComplete([]delivery{del(1, 0, "a"), d, del(1, 2, "c")}, log3, []wkey{k})
		}, "never delivered and ACKed (first 1)"},
		{"window: checkpoint past an offset never received", func(tl *tally) []string {
			return checkWindowDeliveries([]delivery{wdel(1, 0, false), wdel(1, 2, false)}, log3,
				nil, map[int]map[wkey]int64{1: {wk: 3}}, win, nil, tl)
		}, "killed with checkpoint 3, past offset 1"},
		{"window: checkpoint past a NACKed offset", func(tl *tally) []string {
			return checkWindowDeliveries([]delivery{wdel(1, 0, false), wdel(1, 1, true), wdel(1, 2, false)}, log3,
				nil, map[int]map[wkey]int64{1: {wk: 2}}, win, nil, tl)
		}, "killed with checkpoint 2, past offset 1"},
		{"window: run started past an unACKed offset", func(tl *tally) []string {
			return checkWindowDeliveries([]delivery{wdel(1, 0, false), wdel(2, 2, false)}, log3,
				map[int]map[wkey]int64{2: {wk: 2}}, nil, win, nil, tl)
		}, "run 2 started from checkpoint 2, past offset 1"},
		{"window: sent below the checkpoint", func(tl *tally) []string {
			return checkWindowDeliveries([]delivery{wdel(1, 0, false), wdel(1, 1, false), wdel(2, 0, false)}, log3,
				map[int]map[wkey]int64{2: {wk: 1}}, nil, win, nil, tl)
		}, "offset 0 sent below the checkpoint 1"},
		{"window: checkpoint went back", func(tl *tally) []string {
			return checkWindowDeliveries([]delivery{wdel(1, 0, false), wdel(1, 1, false), wdel(2, 1, false)}, log3,
				map[int]map[wkey]int64{2: {wk: 1}}, map[int]map[wkey]int64{2: {wk: 0}}, win, nil, tl)
		}, "checkpoint went back from 1 to 0"},
		{"window: other bytes", func(tl *tally) []string {
			d := wdel(1, 0, false)
			d.Body = []byte(`{"offset":0,` + string(d.Body[1:]))
			return checkWindowDeliveries([]delivery{d}, log3, nil, nil, win, nil, tl)
		}, "but the log holds"},
		{"window, one push at a time: out of order", func(tl *tally) []string {
			return checkWindowDeliveries([]delivery{wdel(1, 0, false), wdel(1, 2, false), wdel(1, 1, false)}, log3,
				nil, nil, win, win, tl)
		}, "offset 2 sent before 1"},
		{"no dead letter", func(*tally) []string {
			return checkDeadLetters(nil, "dead-letter.d", "d", "t", 1, log3["t"][1], 4)
		}, "is not in dead-letter.d"},
		{"dead letter with the wrong attempts", func(*tally) []string {
			return checkDeadLetters([]stored{dl("x1", "3")}, "dead-letter.d", "d", "t", 1, log3["t"][1], 4)
		}, `header mmmq-dl-attempts = "3"`},
		{"dead letter under the original id", func(*tally) []string {
			return checkDeadLetters([]stored{dl("b", "4")}, "dead-letter.d", "d", "t", 1, log3["t"][1], 4)
		}, "is not a fresh id"},
		{"two dead letters under one id", func(*tally) []string {
			return checkDeadLetters([]stored{dl("x1", "4"), dl("x1", "4")}, "dead-letter.d", "d", "t", 1, log3["t"][1], 4)
		}, "already used by dead-letter.d@0"},
		{"dead letter of another offset", func(*tally) []string {
			return checkDeadLetters([]stored{dl("x1", "4")}, "dead-letter.d", "d", "t", 2, log3["t"][2], 4)
		}, `header mmmq-dl-offset = "1"`},
	}
	for _, c := range cases {
		var tl tally
		bad := c.run(&tl)
		if !strings.Contains(strings.Join(bad, "\n"), c.want) {
			t.Errorf("%s: want a violation containing %q, got %q", c.name, c.want, bad)
		}
	}
	// And a correct history passes: a kill between ACK and commit of
	// offset 1, redelivered from the checkpoint.
	var tl tally
	bad := checkDeliveries([]delivery{del(1, 0, "a"), del(1, 1, "b"), del(2, 1, "b"), del(2, 2, "c")}, log3,
		map[int]map[wkey]int64{1: {k: 0}, 2: {k: 1}}, map[int]map[wkey]int64{1: {k: 1}}, nil, &tl)
	bad = append(bad, checkComplete([]delivery{del(1, 0, "a"), del(1, 1, "b"), del(2, 2, "c")}, log3, []wkey{k})...)
	if len(bad) > 0 || tl.Duplicates != 1 {
		t.Errorf("a correct history: %v, duplicates %d (want none, 1)", bad, tl.Duplicates)
	}
	// A correct window history: run 1 sends 0, 1 and 2 at once; 2 and 0
	// are ACKed, 1 never arrives, the kill leaves the checkpoint at 1; run
	// 2 sends 1 and 2 again, both ACKed, checkpoint 3.
	tl = tally{}
	wd := []delivery{wdel(1, 2, false), wdel(1, 0, false), wdel(2, 2, false), wdel(2, 1, false)}
	bad = checkWindowDeliveries(wd, log3, map[int]map[wkey]int64{1: {wk: 0}, 2: {wk: 1}},
		map[int]map[wkey]int64{1: {wk: 1}, 2: {wk: 3}}, win, nil, &tl)
	bad = append(bad, checkComplete(wd, log3, []wkey{wk})...)
	if len(bad) > 0 || tl.Duplicates != 1 || tl.Delivered != 4 {
		t.Errorf("a correct window history: %v, duplicates %d delivered %d (want none, 1, 4)", bad, tl.Duplicates, tl.Delivered)
	}
	// Two correct dead letters of t@1: the kill after the first append
	// dead-letters it again.
	if bad := checkDeadLetters([]stored{dl("x1", "4"), dl("x2", "4")}, "dead-letter.d", "d", "t", 1, log3["t"][1], 4); len(bad) > 0 {
		t.Errorf("correct dead letters: %v", bad)
	}
	// A correct retry history: a (first publish stored, unanswered) retried
	// as the duplicate at 0; b (first publish lost) retried twice, stored
	// by the second retry at 1; c acknowledged at once.
	var rt retryTally
	rs := []sentMsg{retry("a", 1, -1, false), retry("b", 1, -1, false), retry("c", 1, 2, false),
		retry("a", 2, 0, true), retry("b", 2, -1, false), retry("b", 3, 1, false)}
	if bad := checkRetries(rs, log3, true, &rt); len(bad) > 0 ||
		rt != (retryTally{Messages: 3, Acked: 3, Retried: 2, Retries: 3, RetryDuplicate: 1, RetryStored: 1, RetryNoReply: 1}) {
		t.Errorf("a correct retry history: %v, %s", bad, rt)
	}
}

// TestConsumerBatchFormat posts batch pushes to the test consumer: a well
// formed one is split into one delivery per element, each element's body
// without "offset" being the stored message, and answered per message
// (NACK for the one nack selects); every malformed one is answered 400 and
// reported as a violation.
func TestConsumerBatchFormat(t *testing.T) {
	c := &consumer{nack: func(d delivery) bool { return d.Offset == 8 }}
	port, _ := c.listen(t, 1)
	m := func(id string) string {
		return `{"topic":{"name":"t"},"content":{"id":"` + id + `"},"id":"` + id + `","timestamp":1}`
	}
	post := func(size, first, last string, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/mmmq/messages", port), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("mmmq-consumer-id", "d")
		req.Header.Set("mmmq-topic", "t")
		req.Header.Set("mmmq-batch-size", size)
		req.Header.Set("mmmq-first-offset", first)
		req.Header.Set("mmmq-last-offset", last)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, ans := post("2", "7", "8", `[{"offset":7,`+m("a")[1:]+`,{"offset":8,`+m("b")[1:]+`]`)
	ds := c.deliveries()
	if code != 200 || !strings.Contains(ans, `{"offset":7,"acknowledgement":"ACK"},{"offset":8,"acknowledgement":"NACK"}`) || len(ds) != 2 ||
		ds[0].Offset != 7 || ds[0].ID != "a" || string(ds[0].Body) != m("a") || !ds[0].Acked || ds[0].Batch != 2 ||
		ds[1].Offset != 8 || ds[1].ID != "b" || string(ds[1].Body) != m("b") || ds[1].Acked {
		t.Fatalf("well-formed batch: %d %s, deliveries %+v", code, ans, ds)
	}
	bad := []struct{ size, first, last, body, want string }{
		{"2", "7", "8", `[{"offset":7,` + m("a")[1:] + `]`, "batch of 1 elements, mmmq-batch-size 2"},
		{"1", "6", "7", `[{"offset":7,` + m("a")[1:] + `]`, "headers say 6..7"},
		{"1", "7", "7", `[` + m("a") + `]`, `does not start with {"offset":`},
		{"2", "8", "7", `[{"offset":8,` + m("b")[1:] + `,{"offset":7,` + m("a")[1:] + `]`, "offset 7 after 8"},
		{"1", "7", "7", m("a"), "not a JSON array"},
	}
	for i, b := range bad {
		if code, _ := post(b.size, b.first, b.last, b.body); code != http.StatusBadRequest {
			t.Errorf("malformed batch %d: answered %d, want 400", i, code)
		}
		if v := c.violations(); len(v) != i+1 || !strings.Contains(v[i], b.want) {
			t.Errorf("malformed batch %d: violations %q, want a new one containing %q", i, v, b.want)
		}
	}
	if n := len(c.deliveries()); n != 2 {
		t.Errorf("malformed batches recorded deliveries: %d in all, want the 2 of the good one", n)
	}
}
