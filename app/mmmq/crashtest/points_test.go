package crashtest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// pointRow is one row of the injection-point table (README "Guarantees").
type pointRow struct{ Point, Expected, Observed, Test string }

// dieTimeout bounds the wait for a crash point to kill the broker.
const dieTimeout = 10 * time.Second

// TestCrashPoints runs the broker with MMMQ_CRASHPOINT set for every named
// injection point of app/mmmq/crashpoints.go, lets it die there by SIGKILL,
// restarts it and compares what happened with what the design promises.
// The table of rows is logged at the end.
func TestCrashPoints(t *testing.T) {
	// The cases read and reshape the segment files as they are without
	// preallocation (an entry ends the file): they run with it off. The
	// default (on) is covered by TestCrashRandomKill*, TestLazyFSPowerLoss
	// (on and off) and TestPreallocCleanStopAndKill.
	brokerPreallocate = new(int64)
	defer func() { brokerPreallocate = nil }()
	var (
		mu   sync.Mutex
		rows []pointRow
	)
	add := func(r pointRow) {
		mu.Lock()
		rows = append(rows, r)
		mu.Unlock()
	}
	type pcase struct {
		name string
		fn   func(t *testing.T) pointRow
	}
	cases := []pcase{
		{"after-segment-write", func(t *testing.T) pointRow { return reindexedTailCase(t, "after-segment-write") }},
		{"after-segment-sync", func(t *testing.T) pointRow { return reindexedTailCase(t, "after-segment-sync") }},
		{"after-segment-write-torn-tail", tornTailCase},
		{"after-segment-write-damaged-then-valid", damagedTailCase},
		{"after-segment-write-damaged-then-valid-beyond-group", damagedBeyondGroupCase},
		{"after-index-write", afterIndexWriteCase},
		{"after-index-sync", afterIndexSyncCase},
		{"after-reply-before-index-sync-lazy", afterReplyBeforeIndexSyncCase},
		{"before-seal-index-sync-lazy", beforeSealIndexSyncCase},
		{"rotate-between-mmm-and-idx", rotateCase},
		{"after-ack-before-checkpoint", afterAckCase},
		{"after-dead-letter-before-checkpoint", afterDeadLetterCase},
		{"after-dead-letter-before-checkpoint-control-dead-letters-off", deadLettersOffControl},
		{"accepted-offset-not-stable", acceptedNotStableCase},
		{"delete-after-rename", func(t *testing.T) pointRow { return deleteCase(t, "delete-after-rename", 1) }},
		{"delete-after-rename-sync", func(t *testing.T) pointRow { return deleteCase(t, "delete-after-rename-sync", 1) }},
		{"delete-mid-remove", func(t *testing.T) pointRow { return deleteCase(t, "delete-mid-remove", 2) }},
		{"between-segment-unlinks", betweenUnlinksCase},
		{"dispatchers-before-rename", dispatchersFileCase},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.fn(t)
			r.Test = t.Name()
			add(r)
		})
	}
	var b strings.Builder
	b.WriteString("\n| point | expected | observed | test |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Point, r.Expected, r.Observed, r.Test)
	}
	t.Log(b.String())
}

// content returns compact JSON content carrying id.
func content(id string, pad int) []byte {
	c, _ := json.Marshal(map[string]any{"id": id, "pad": strings.Repeat("p", pad)})
	return c
}

// mustPublish publishes id (content(id, 40)) and fails the test on
// anything but ACK.
func mustPublish(t *testing.T, b *broker, topic, id, level string) pubResult {
	t.Helper()
	return mustPublishPad(t, b, topic, id, level, 40)
}

// mustPublishPad is mustPublish with content(id, pad).
func mustPublishPad(t *testing.T, b *broker, topic, id, level string, pad int) pubResult {
	t.Helper()
	r := publish(b.base, topic, id, content(id, pad), level)
	if !r.Ack {
		t.Fatalf("publish %s: %+v\n%s", id, r, b.logTail())
	}
	return r
}

// expectDeath publishes id and expects no reply because the crash point
// killed the broker with SIGKILL while handling it.
func expectDeath(t *testing.T, b *broker, topic, id, level string) {
	t.Helper()
	r := publish(b.base, topic, id, content(id, 40), level)
	if r.Replied {
		t.Fatalf("publish %s at the crash point got a reply: %+v", id, r)
	}
	killed, err := b.waitDeath(dieTimeout)
	if err != nil || !killed {
		t.Fatalf("broker did not die of SIGKILL at the crash point: killed=%v err=%v\n%s", killed, err, b.logTail())
	}
	if !strings.Contains(b.logText(), "crash point") {
		t.Fatalf("no crash point line in the broker output:\n%s", b.logTail())
	}
}

// crashOnM3 starts a broker on a fresh data root whose crash point fires
// the fourth time it is reached, publishes m0..m2 to topic DURABLE, then m3
// at level, which must kill the broker (expectDeath). It returns the root.
func crashOnM3(t *testing.T, point, topic, level string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "data")
	b := startBroker(t, brokerConf{DataDir: root, Crashpoint: point, CrashAfter: 4})
	for i := range 3 {
		mustPublish(t, b, topic, fmt.Sprintf("m%d", i), "durable")
	}
	expectDeath(t, b, topic, "m3", level)
	return root
}

// ids returns the ids of a read-back log.
func ids(l []stored) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = s.ID
	}
	return out
}

func mustRead(t *testing.T, b *broker, topic string) []stored {
	t.Helper()
	l, err := readAll(b.base, topic)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// segFiles lists the .mmm/.idx files of a topic with their sizes.
func segFiles(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range es {
		if strings.HasSuffix(e.Name(), ".mmm") || strings.HasSuffix(e.Name(), ".idx") {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = fi.Size()
		}
	}
	return out
}

// afterIndexWriteCase: .mmm fsynced, .idx written (page cache) but not
// fsynced. A process crash keeps the page cache, so the entry IS visible
// after restart although its publisher got no reply (the log-queue study's
// crash_written_before_force experiment).
func afterIndexWriteCase(t *testing.T) pointRow {
	const topic = "cp.t"
	root := crashOnM3(t, "after-index-write", topic, "written")
	b := startBroker(t, brokerConf{DataDir: root})
	l := mustRead(t, b, topic)
	if got := strings.Join(ids(l), ","); got != "m0,m1,m2,m3" {
		t.Fatalf("after restart the log holds %s, want m0,m1,m2,m3 (the index write survives a process crash)", got)
	}
	clean := !strings.Contains(b.logText(), "recovery changed the topic")
	b.stop()
	return pointRow{
		Point:    "after-index-write",
		Expected: "no reply (not even WRITTEN), but the entry is visible after restart: a process crash keeps the page cache (the log-queue study's crash_written_before_force experiment)",
		Observed: fmt.Sprintf("m3 (ack=written) got no reply; restart: m3 at offset 3, m0..m2 intact, recovery clean=%v", clean),
	}
}

// afterIndexSyncCase: everything fsynced, the reply not sent. The entry is
// durable; the producer cannot know and retries. In the log-queue study's
// crash_forced_before_reply_dup experiment the message is then stored
// twice; here the retry carries the same producer id, the window rebuilt
// from the log after the restart recognises it, and it is answered as a
// duplicate at offset 3: one copy.
func afterIndexSyncCase(t *testing.T) pointRow {
	const topic = "cp.t"
	root := crashOnM3(t, "after-index-sync", topic, "durable")
	b := startBroker(t, brokerConf{DataDir: root})
	retry, l := retryAsDuplicate(t, b, topic)
	b.stop()
	return pointRow{
		Point:    "after-index-sync",
		Expected: "no reply, entry durable and visible after restart; the producer's retry with the same id is answered as a duplicate at the first offset and stores nothing (without an id, or after the dedup window, it would be stored again: the log-queue study's crash_forced_before_reply_dup experiment)",
		Observed: fmt.Sprintf("m3 got no reply; restart: m3 at offset 3; retry ACK offset %d duplicate=%t; log ids %v", retry.Offset, retry.Duplicate, ids(l)),
	}
}

// rotateCase: killed between creating <next>.mmm and <next>.idx. Restart
// completes the rotation (the lone empty .mmm gets its .idx) and accepts
// writes.
func rotateCase(t *testing.T) pointRow {
	root := filepath.Join(t.TempDir(), "data")
	const topic = "cp.t"
	dir := filepath.Join(root, topic)
	b := startBroker(t, brokerConf{DataDir: root, SegmentMaxBytes: 1024, Crashpoint: "rotate-between-mmm-and-idx"})
	var acked []string
	died := false
	for i := range 50 {
		id := fmt.Sprintf("m%d", i)
		r := publish(b.base, topic, id, content(id, 200), "durable")
		if r.Ack {
			acked = append(acked, id)
			continue
		}
		if r.Replied {
			t.Fatalf("publish %s: %+v", id, r)
		}
		died = true
		break
	}
	if !died {
		t.Fatal("no rotation crash within 50 publishes")
	}
	if killed, err := b.waitDeath(dieTimeout); err != nil || !killed {
		t.Fatalf("broker did not die of SIGKILL: %v %v", killed, err)
	}
	next := fmt.Sprintf("%019d", len(acked))
	files := segFiles(t, dir)
	size, hasMMM := files[next+".mmm"]
	_, hasIdx := files[next+".idx"]
	if !hasMMM || size != 0 || hasIdx {
		t.Fatalf("after the kill: files %v, want a lone empty %s.mmm", files, next)
	}
	before := fmt.Sprintf("lone empty %s.mmm, no .idx", next)
	b = startBroker(t, brokerConf{DataDir: root, SegmentMaxBytes: 1024})
	if !strings.Contains(b.logText(), "complete interrupted rotation: create "+next+".idx") {
		t.Fatalf("recovery did not report completing the rotation:\n%s", b.logTail())
	}
	if _, ok := segFiles(t, dir)[next+".idx"]; !ok {
		t.Fatalf("%s.idx not created by recovery", next)
	}
	r := mustPublish(t, b, topic, "after", "durable")
	l := mustRead(t, b, topic)
	want := strings.Join(append(append([]string(nil), acked...), "after"), ",")
	if got := strings.Join(ids(l), ","); got != want || r.Offset != int64(len(acked)) {
		t.Fatalf("log %s (new publish at %d), want %s at %d", got, r.Offset, want, len(acked))
	}
	b.stop()
	return pointRow{
		Point:    "rotate-between-mmm-and-idx",
		Expected: "restart completes the rotation (creates the missing .idx), every DURABLE entry intact, the entry that triggered the rotation absent, writes accepted",
		Observed: fmt.Sprintf("killed on the first rotation after %d DURABLE acks: %s; restart: recovery \"complete interrupted rotation: create %s.idx\"; new publish ACK at offset %d in the new segment; %d acked intact", len(acked), before, next, r.Offset, len(acked)),
	}
}

// afterAckCase: the consumer ACKed offset n, the broker died before the
// checkpoint fsync: the checkpoint still says n and offset n is delivered
// again after restart (at-least-once: the original Java mmmq's order is ACK →
// commit (fsync) → next message).
func afterAckCase(t *testing.T) pointRow {
	root := filepath.Join(t.TempDir(), "data")
	const topic = "cp.t"
	b := startBroker(t, brokerConf{DataDir: root})
	for i := range 5 {
		mustPublish(t, b, topic, fmt.Sprintf("m%d", i), "durable")
	}
	b.stop()
	cons := &consumer{}
	disp := func(port int) []dispatcherConf {
		return []dispatcherConf{{Name: "d1", Port: port, Patterns: []string{"cp.*"}}}
	}
	port, closeRun1 := cons.listen(t, 1)
	b = startBroker(t, brokerConf{DataDir: root, Dispatchers: disp(port), Crashpoint: "after-ack-before-checkpoint", CrashAfter: 3, MayDieStarting: true})
	if killed, err := b.waitDeath(dieTimeout); err != nil || !killed {
		t.Fatalf("broker did not die of SIGKILL after the 3rd ACK: %v %v\n%s", killed, err, b.logTail())
	}
	closeRun1()
	cpPath := filepath.Join(root, topic, "checkpoints", "d1.checkpoint")
	data, err := os.ReadFile(cpPath)
	if err != nil || len(data) != 8 {
		t.Fatalf("checkpoint after the kill: %v %d bytes", err, len(data))
	}
	cp := int64(binary.BigEndian.Uint64(data))
	port, _ = cons.listen(t, 2)
	b = startBroker(t, brokerConf{DataDir: root, Dispatchers: disp(port)})
	deadline := time.Now().Add(10 * time.Second)
	for len(cons.deliveries()) < 6 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	b.stop()
	var seq []string
	for _, d := range cons.deliveries() {
		seq = append(seq, fmt.Sprintf("run%d:%d", d.Round, d.Offset))
	}
	got := strings.Join(seq, " ")
	const want = "run1:0 run1:1 run1:2 run2:2 run2:3 run2:4"
	if cp != 2 || got != want {
		t.Fatalf("checkpoint after kill %d (want 2), deliveries %q (want %q)", cp, got, want)
	}
	tl := tally{}
	cur := map[string][]stored{topic: nil}
	b = startBroker(t, brokerConf{DataDir: root})
	cur[topic] = mustRead(t, b, topic)
	b.stop()
	bad := checkDeliveries(cons.deliveries(), cur,
		map[int]map[wkey]int64{1: {{"d1", topic}: 0}, 2: {{"d1", topic}: 2}},
		map[int]map[wkey]int64{1: {{"d1", topic}: 2}}, nil, &tl)
	if len(bad) > 0 {
		t.Fatalf("delivery checks: %v", bad)
	}
	return pointRow{
		Point:    "after-ack-before-checkpoint",
		Expected: "consumer ACKed offset n, checkpoint still n on disk → after restart offset n is delivered again (at-least-once), then n+1...; nothing skipped",
		Observed: fmt.Sprintf("killed after the ACK of offset 2; checkpoint on disk = %d; deliveries %s (offset 2 twice, %d duplicate)", cp, got, tl.Duplicates),
	}
}

// betweenUnlinksCase: retention (1 KiB segments, max-bytes 4096) runs
// while DURABLE publishes go on, and the broker is killed between the two
// unlinks of a head segment (its .idx removed, its .mmm not). Restarted,
// recovery finishes the deletion instead of refusing the topic, and every
// acknowledged message at or after the start offset reads back unchanged
// at its offset.
func betweenUnlinksCase(t *testing.T) pointRow {
	root := filepath.Join(t.TempDir(), "data")
	const topic = "cp.ret"
	dir := filepath.Join(root, topic)
	b := startBroker(t, brokerConf{DataDir: root, SegmentMaxBytes: 1024, RetentionMaxBytes: 4096, Crashpoint: "between-segment-unlinks"})
	acked := map[int64]string{} // offset -> id
	died := false
	for i := range 5000 {
		id := fmt.Sprintf("m%d", i)
		r := publish(b.base, topic, id, content(id, 200), "durable")
		if r.Ack {
			acked[r.Offset] = id
			continue
		}
		if r.Replied {
			t.Fatalf("publish %s: %+v", id, r)
		}
		died = true
		break
	}
	if !died {
		// The crash fires from the retention loop, not from a publish.
		if killed, _ := b.waitDeath(dieTimeout); !killed {
			t.Fatal("no crash between the unlinks within 5000 publishes")
		}
	}
	if killed, err := b.waitDeath(dieTimeout); err != nil || !killed {
		t.Fatalf("broker did not die of SIGKILL: %v %v", killed, err)
	}
	files := segFiles(t, dir)
	// The first segment's lone .mmm. The writer may also have been
	// killed inside a rotation, leaving a lone empty .mmm at the tail
	// (recovery completes that rotation): the lowest name is the head.
	var lones []string
	for name := range files {
		base := strings.TrimSuffix(name, ".mmm")
		if base != name {
			if _, ok := files[base+".idx"]; !ok {
				lones = append(lones, name)
			}
		}
	}
	sort.Strings(lones)
	lone := ""
	if len(lones) > 0 {
		lone = lones[0]
	}
	if lone == "" {
		t.Fatalf("after the kill: files %v, want a first segment with only its .mmm", files)
	}
	b = startBroker(t, brokerConf{DataDir: root, SegmentMaxBytes: 1024})
	if !strings.Contains(b.logText(), "finish interrupted retention deletion: remove "+lone) {
		t.Fatalf("recovery did not report finishing the deletion of %s:\n%s", lone, b.logTail())
	}
	if _, ok := segFiles(t, dir)[lone]; ok {
		t.Fatalf("%s still there after recovery", lone)
	}
	start, l := readFromStart(t, b, topic)
	checked := 0
	for off, id := range acked {
		if off < start {
			continue
		}
		if i := off - start; i >= int64(len(l)) || l[i].ID != id {
			t.Fatalf("acknowledged %s at offset %d not read back there (start %d, %d messages)", id, off, start, len(l))
		}
		checked++
	}
	if start == 0 || checked == 0 {
		t.Fatalf("start offset %d, %d acknowledged messages checked", start, checked)
	}
	b.stop()
	return pointRow{Point: "between-segment-unlinks", Expected: "restart finishes the deletion; acked messages from the start offset intact",
		Observed: fmt.Sprintf("lone %s removed by recovery; start offset %d; %d acked messages at or after it intact", lone, start, checked)}
}

// readFromStart reads topic from its start offset (GET /topics) to the
// end, requiring contiguous offsets and no read error. Retention may run
// while it reads: a 410 (the start offset moved on) starts the read again
// from the new start, a few times at most.
func readFromStart(t *testing.T, b *broker, topic string) (int64, []stored) {
	t.Helper()
	for attempt := 0; attempt < 5; attempt++ {
		start, l, expired := readFromStartOnce(t, b, topic)
		if !expired {
			return start, l
		}
	}
	t.Fatalf("topic %s: the start offset moved during 5 reads in a row", topic)
	return 0, nil
}

func readFromStartOnce(t *testing.T, b *broker, topic string) (int64, []stored, bool) {
	t.Helper()
	resp, err := httpClient.Get(b.base + "/topics")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Topics []struct {
			Name        string `json:"name"`
			StartOffset int64  `json:"startOffset"`
			NextOffset  int64  `json:"nextOffset"`
		} `json:"topics"`
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range v.Topics {
		if tp.Name != topic {
			continue
		}
		var out []stored
		for off := tp.StartOffset; off < tp.NextOffset; {
			r, err := httpClient.Get(fmt.Sprintf("%s/topics/%s/messages?offset=%d&limit=1000", b.base, topic, off))
			if err != nil {
				t.Fatal(err)
			}
			var page struct {
				Messages []struct {
					Offset  int64           `json:"offset"`
					Message json.RawMessage `json:"message"`
					Error   string          `json:"error"`
				} `json:"messages"`
			}
			err = json.NewDecoder(r.Body).Decode(&page)
			r.Body.Close()
			if r.StatusCode == http.StatusGone {
				return 0, nil, true
			}
			if err != nil || r.StatusCode != 200 || len(page.Messages) == 0 {
				t.Fatalf("read %s at %d: %d %v", topic, off, r.StatusCode, err)
			}
			for _, m := range page.Messages {
				s, err := parseStored(m.Message)
				if m.Offset != off || m.Error != "" || err != nil {
					t.Fatalf("offset %d: %+v %v", off, m, err)
				}
				out = append(out, s)
				off++
			}
		}
		return tp.StartOffset, out, false
	}
	t.Fatalf("topic %s not in GET /topics", topic)
	return 0, nil, false
}

// The dead-letter cases: topic cp.t holds m0..m4, dispatcher d1 pushes it
// one message at a time to a consumer that NACKs offset 2 (m2) on every
// attempt and ACKs the others.
const (
	dlTopic    = "cp.t"
	dlPoison   = int64(2)
	dlAttempts = 4 // the default max-resends 3, plus the first send
)

// dlSetup stores m0..m4 in cp.t (DURABLE) on a fresh data root and returns
// the root, the log as read back, and a consumer that NACKs offset 2.
func dlSetup(t *testing.T) (string, []stored, *consumer) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "data")
	b := startBroker(t, brokerConf{DataDir: root})
	for i := range 5 {
		mustPublish(t, b, dlTopic, fmt.Sprintf("m%d", i), "durable")
	}
	orig := mustRead(t, b, dlTopic)
	b.stop()
	cons := &consumer{nack: func(d delivery) bool { return d.Topic == dlTopic && d.Offset == dlPoison }}
	return root, orig, cons
}

// dlDisp is dispatcher d1 on cp.* pushing to port; dl, when not nil, is its
// dead-letter setting.
func dlDisp(port int, dl *string) []dispatcherConf {
	return []dispatcherConf{{Name: "d1", Port: port, Patterns: []string{"cp.*"}, DeadLetter: dl}}
}

// checkpointOnDisk reads the checkpoint of dispatcher d on topic (-1 when
// there is none).
func checkpointOnDisk(t *testing.T, root, topic, d string) int64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, topic, "checkpoints", d+".checkpoint"))
	if os.IsNotExist(err) {
		return -1
	}
	if err != nil || len(data) != 8 {
		t.Fatalf("checkpoint %s/%s: %v, %d bytes", topic, d, err, len(data))
	}
	return int64(binary.BigEndian.Uint64(data))
}

// runSeq is the deliveries of cons as "runN:offset:ACK|NACK".
func runSeq(cons *consumer) string {
	var seq []string
	for _, d := range cons.deliveries() {
		a := "ACK"
		if !d.Acked {
			a = "NACK"
		}
		seq = append(seq, fmt.Sprintf("run%d:%d:%s", d.Round, d.Offset, a))
	}
	return strings.Join(seq, " ")
}

// waitCheckpoint waits, at most 10 s, until the checkpoint of d on topic
// is want.
func waitCheckpoint(t *testing.T, b *broker, root, topic, d string, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for checkpointOnDisk(t, root, topic, d) != want {
		if !b.alive() {
			t.Fatalf("broker died:\n%s", b.logTail())
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint %s/%s is %d, not %d, 10 s on\n%s", topic, d, checkpointOnDisk(t, root, topic, d), want, b.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// afterDeadLetterCase: offset 2 is NACKed on all 4 attempts, appended
// (fsynced) to dead-letter.d1, and the broker is killed before the
// checkpoint moves past it. The dead letter survives the kill and the
// checkpoint is still 2; after the restart offset 2 is sent and NACKed
// again and dead-lettered a second time (at least once: never lost, here
// twice), then 3 and 4 are delivered and the checkpoint reaches 5. Every
// copy carries the mmmq-dl-* headers (offset 2, 4 attempts,
// nack-exhausted, the original id) and a fresh id.
func afterDeadLetterCase(t *testing.T) pointRow {
	root, orig, cons := dlSetup(t)
	const dl = "dead-letter.d1"
	port, closeRun1 := cons.listen(t, 1)
	b := startBroker(t, brokerConf{DataDir: root, Dispatchers: dlDisp(port, nil), Crashpoint: "after-dead-letter-before-checkpoint", MayDieStarting: true})
	if killed, err := b.waitDeath(dieTimeout); err != nil || !killed {
		t.Fatalf("broker did not die of SIGKILL after the dead letter: %v %v\n%s", killed, err, b.logTail())
	}
	closeRun1()
	run1 := runSeq(cons)
	const want1 = "run1:0:ACK run1:1:ACK run1:2:NACK run1:2:NACK run1:2:NACK run1:2:NACK"
	cpKill := checkpointOnDisk(t, root, dlTopic, "d1")
	if run1 != want1 || cpKill != dlPoison {
		t.Fatalf("killed run: deliveries %q (want %q), checkpoint %d (want %d)", run1, want1, cpKill, dlPoison)
	}
	// What the kill left, read by a broker without dispatchers: the dead
	// letter is there once, durable, and the topic is untouched.
	b = startBroker(t, brokerConf{DataDir: root})
	atKill := mustRead(t, b, dl)
	if bad := checkDeadLetters(atKill, dl, "d1", dlTopic, dlPoison, orig[dlPoison], dlAttempts); len(bad) > 0 || len(atKill) != 1 {
		t.Fatalf("after the kill, %s holds %d messages (want 1): %v", dl, len(atKill), bad)
	}
	if got := strings.Join(ids(mustRead(t, b, dlTopic)), ","); got != "m0,m1,m2,m3,m4" {
		t.Fatalf("%s holds %s after the kill", dlTopic, got)
	}
	b.stop()
	// Restart with the dispatcher, without the crash point.
	port, _ = cons.listen(t, 3)
	b = startBroker(t, brokerConf{DataDir: root, Dispatchers: dlDisp(port, nil)})
	waitCheckpoint(t, b, root, dlTopic, "d1", 5)
	dls := mustRead(t, b, dl)
	b.stop()
	seq := runSeq(cons)
	const want = want1 + " run3:2:NACK run3:2:NACK run3:2:NACK run3:2:NACK run3:3:ACK run3:4:ACK"
	var bad []string
	if seq != want {
		bad = append(bad, fmt.Sprintf("deliveries %q, want %q", seq, want))
	}
	if cp := checkpointOnDisk(t, root, dlTopic, "d1"); cp != 5 {
		bad = append(bad, fmt.Sprintf("checkpoint %d after the stop, want 5", cp))
	}
	bad = append(bad, checkDeadLetters(dls, dl, "d1", dlTopic, dlPoison, orig[dlPoison], dlAttempts)...)
	if len(dls) > 0 && !bytes.Equal(dls[0].Raw, atKill[0].Raw) {
		bad = append(bad, fmt.Sprintf("%s@0 changed after the restart: was %s, now %s", dl, atKill[0].Raw, dls[0].Raw))
	}
	// Nothing lost: every offset ACKed, or NACKed to exhaustion and
	// dead-lettered.
	acked := map[int64]bool{}
	for _, d := range cons.deliveries() {
		acked[d.Offset] = acked[d.Offset] || d.Acked
	}
	for off := range int64(len(orig)) {
		if !acked[off] && (off != dlPoison || len(dls) == 0) {
			bad = append(bad, fmt.Sprintf("%s@%d neither ACKed nor dead-lettered", dlTopic, off))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("after the restart: %s holds %d dead letters; violations:\n  %s", dl, len(dls), strings.Join(bad, "\n  "))
	}
	return pointRow{
		Point:    "after-dead-letter-before-checkpoint",
		Expected: "offset NACKed 4 times, appended durably to dead-letter.<dispatcher>, killed before the checkpoint moves: the dead letter survives, the checkpoint stays; after restart the offset is dead-lettered again (at least once, never lost), then the next offsets are delivered",
		Observed: fmt.Sprintf("killed after the dead letter of offset 2; checkpoint on disk = %d, %s holds 1 message; restart: deliveries %s; %s holds %d copies (ids %v, original %s), headers offset=%s attempts=%s reason=%s; checkpoint 5",
			cpKill, dl, strings.TrimPrefix(seq, want1+" "), dl, len(dls), ids(dls), orig[dlPoison].ID,
			dls[0].Headers["mmmq-dl-offset"], dls[0].Headers["mmmq-dl-attempts"], dls[0].Headers["mmmq-dl-reason"]),
	}
}

// deadLettersOffControl is the negative control of afterDeadLetterCase: the
// same history with dead letters off (dead-letter: ""), where the broker
// logs offset 2 and skips it. The crash point is set but never reached,
// and checkDeadLetters, given the real dead-letter topic, must report the
// missing dead letter.
func deadLettersOffControl(t *testing.T) pointRow {
	root, orig, cons := dlSetup(t)
	const dl = "dead-letter.d1"
	off := ""
	port, _ := cons.listen(t, 1)
	b := startBroker(t, brokerConf{DataDir: root, Dispatchers: dlDisp(port, &off), Crashpoint: "after-dead-letter-before-checkpoint"})
	waitCheckpoint(t, b, root, dlTopic, "d1", 5)
	dls := mustRead(t, b, dl)
	logged := strings.Contains(b.logText(), "dead letters are off")
	b.stop()
	bad := checkDeadLetters(dls, dl, "d1", dlTopic, dlPoison, orig[dlPoison], dlAttempts)
	const want = "run1:0:ACK run1:1:ACK run1:2:NACK run1:2:NACK run1:2:NACK run1:2:NACK run1:3:ACK run1:4:ACK"
	if seq := runSeq(cons); seq != want || len(dls) != 0 || !logged || len(bad) != 1 || !strings.Contains(bad[0], "is not in "+dl) {
		t.Fatalf("dead letters off: deliveries %q (want %q), %s holds %d, skip logged %t, violations %q (want one: not in %s)",
			seq, want, dl, len(dls), logged, bad, dl)
	}
	return pointRow{
		Point:    "after-dead-letter-before-checkpoint (negative control: dead letters off)",
		Expected: "offset 2 logged and skipped, no dead letter, the crash point never reached; the dead-letter check must report it",
		Observed: fmt.Sprintf("broker alive, checkpoint 5, %s empty; checkDeadLetters: %q", dl, bad),
	}
}
