package crashtest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestCrashRandomKillRetrySameID is the random-kill harness
// (runRandomKill) with producers that retry: besides two plain producers,
// six retrying producers publish DURABLE messages with unique ids, and a
// publish that got no reply (the broker was killed) or a 503 is published
// again after the restart, same id and content, until it is acknowledged.
// On top of every check of TestCrashRandomKill, after every restart: no id
// of theirs is stored twice, and a retry answered "duplicate": true names
// the offset where its id is stored; at the end every one of their
// messages is acknowledged and in the log exactly once. The random rounds
// run once per index-sync mode (rkModes).
//
// Two deterministic controls run first (index-sync commit, the default:
// the crash point is in its index fsync), one retrying producer killed at
// the crash point after-index-sync (its fourth message stored, fsynced,
// never answered): with the dedup window on, the retry is answered as the
// duplicate at offset 3 and the checks pass; with the window off
// (mmmq.broker.dedup.window: 0s) the retry is stored a second time and the
// same checks must report it, which shows they can fail.
func TestCrashRandomKillRetrySameID(t *testing.T) {
	t.Run("control-window-on", func(t *testing.T) {
		res, l, bad, rt := retryAfterIndexSync(t, "2m")
		if got := strings.Join(ids(l), ","); len(bad) > 0 || rt.StoredTwice != 0 || !res.Ack || !res.Duplicate || res.Offset != 3 || got != "q0-000000,q0-000001,q0-000002,q0-000003" {
			t.Fatalf("retry %+v, log %s, %s, violations %q; want the retry answered as the duplicate at offset 3, one copy, no violation",
				res, got, rt, bad)
		}
		t.Logf("window on: retry ACK offset %d duplicate=%t; log %v; %s", res.Offset, res.Duplicate, ids(l), rt)
	})
	t.Run("control-window-off", func(t *testing.T) {
		res, l, bad, rt := retryAfterIndexSync(t, "0s")
		twice := 0
		for _, v := range bad {
			if strings.Contains(v, "stored twice") || strings.Contains(v, "stored 2 times") {
				twice++
			}
		}
		if got := strings.Join(ids(l), ","); rt.StoredTwice != 1 || twice != 2 || !res.Ack || res.Duplicate || res.Offset != 4 || got != "q0-000000,q0-000001,q0-000002,q0-000003,q0-000003" {
			t.Fatalf("retry %+v, log %s, %s, violations %q; want the retry stored again at offset 4 and the second copy reported by checkLogIDs and checkRetries",
				res, got, rt, bad)
		}
		t.Logf("window off (negative control): retry ACK offset %d duplicate=%t; log %v; %s; the checks reported: %q", res.Offset, res.Duplicate, ids(l), rt, bad)
	})
	forEachMode(t, func(t *testing.T, m indexSyncMode) {
		res := runRandomKill(t, m, rkLoad{Plain: 2, Retrying: 6})
		if rt := res.Retry; rt.Retries == 0 || rt.StoredTwice != 0 || rt.Acked != rt.Messages {
			t.Fatalf("retrying producers: %s; want retries > 0 (the kills left publishes unanswered), every message acknowledged, none stored twice", rt)
		}
	})
}

// retrier is one retrying producer: it publishes DURABLE messages with
// unique ids ("q<g>-<n>") to random topics, and keeps a message that got no
// reply or a 503 to publish it again, same id and content, in the next run
// of the broker, until it is acknowledged.
type retrier struct {
	g       int
	n       int      // messages made so far
	pending *sentMsg // unanswered, published again before any new message
}

// step publishes the producer's next message to base: the pending one
// again, or a new one to a topic of topics. It returns the publish and
// whether the producer goes on in this run: after no reply or a 503 the
// message stays pending until the restart. Any other answer but ACK is an
// error (and the message stays pending).
func (p *retrier) step(base string, round int, topics []string, prng *rand.Rand) (sentMsg, bool, error) {
	var m sentMsg
	if p.pending != nil {
		m = *p.pending
		m.Attempt++
	} else {
		m = sentMsg{Topic: topics[prng.IntN(len(topics))], ID: fmt.Sprintf("q%d-%06d", p.g, p.n), Level: "durable", Retrying: true, Attempt: 1}
		m.Content, _ = json.Marshal(map[string]any{"id": m.ID, "retrying": true, "pad": strings.Repeat("y", prng.IntN(160))})
		p.n++
	}
	m.Round = round
	m.Res = publish(base, m.Topic, m.ID, m.Content, m.Level)
	switch {
	case m.Res.Ack:
		p.pending = nil
		return m, true, nil
	case !m.Res.Replied || m.Res.Status == http.StatusServiceUnavailable:
		p.pending = &m
		return m, false, nil
	default:
		p.pending = &m
		return m, false, fmt.Errorf("publish %d of %s NACK %d: %s", m.Attempt, m.ID, m.Res.Status, m.Res.Err)
	}
}

// publishPending publishes each retrier's pending message to b once more
// (recorded in sent); every one must be acknowledged. It returns how many
// it published.
func publishPending(t *testing.T, rs []*retrier, b *broker, round int, sent *[]sentMsg) int {
	t.Helper()
	n := 0
	for _, p := range rs {
		if p.pending == nil {
			continue
		}
		m, goOn, err := p.step(b.base, round, nil, nil)
		*sent = append(*sent, m)
		n++
		if err != nil || !goOn {
			t.Fatalf("publish %d of %s to a running broker: %+v %v", m.Attempt, m.ID, m.Res, err)
		}
	}
	return n
}

// retryAfterIndexSync runs one retrying producer against a broker with the
// given dedup window whose crash point after-index-sync fires on the fourth
// publish: three DURABLE messages acknowledged at offsets 0..2, the fourth
// stored and fsynced but the broker killed before the reply. Restarted
// (same window), the producer publishes the fourth again with its id. It
// returns the retry's reply, the log read back, and what checkAcked,
// checkLogIDs and checkRetries (final) report on it.
func retryAfterIndexSync(t *testing.T, window string) (pubResult, []stored, []string, retryTally) {
	t.Helper()
	const topic = "cq.t"
	topics := []string{topic}
	root := filepath.Join(t.TempDir(), "data")
	conf := brokerConf{DataDir: root, DedupWindow: window}
	crash := conf
	crash.Crashpoint, crash.CrashAfter = "after-index-sync", 4
	b := startBroker(t, crash)
	p := &retrier{}
	prng := rand.New(rand.NewPCG(1, 2))
	var sent []sentMsg
	for i := range 4 {
		m, goOn, err := p.step(b.base, 1, topics, prng)
		sent = append(sent, m)
		if err != nil {
			t.Fatal(err)
		}
		if (i < 3 && (!goOn || m.Res.Offset != int64(i))) || (i == 3 && m.Res.Replied) {
			t.Fatalf("publish of %s: %+v; want ACKs at offsets 0..2, then no reply (killed at the crash point)\n%s", m.ID, m.Res, b.logTail())
		}
	}
	if killed, err := b.waitDeath(dieTimeout); err != nil || !killed {
		t.Fatalf("broker did not die of SIGKILL at the crash point: killed=%v err=%v\n%s", killed, err, b.logTail())
	}
	if p.pending == nil || p.pending.ID != sent[3].ID {
		t.Fatalf("the unanswered %s is not pending: %+v", sent[3].ID, p.pending)
	}
	b = startBroker(t, conf)
	m, goOn, err := p.step(b.base, 2, topics, prng)
	sent = append(sent, m)
	if err != nil || !goOn {
		t.Fatalf("retry of %s: %+v %v", m.ID, m.Res, err)
	}
	l := mustRead(t, b, topic)
	b.stop()
	cur := map[string][]stored{topic: l}
	var (
		tl tally
		rt retryTally
	)
	bad := checkAcked(sent, cur, &tl)
	bad = append(bad, checkLogIDs(sent, cur)...)
	bad = append(bad, checkRetries(sent, cur, true, &rt)...)
	return m.Res, l, bad, rt
}
