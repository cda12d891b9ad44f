package crashtest

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The rows of this file run the broker with index-sync lazy: a group
// commit fsyncs the segment, writes the index and answers; the index is
// fsynced before a rotation seals the segment, at close and every
// index-sync-interval (here an hour, so never by the timer within a test).
//
// A process kill keeps the page cache: the index entries the broker wrote
// are usually still in the file after the kill, and a plain restart may
// find nothing to repair. What must hold is that no acknowledged entry is
// lost, offsets stay contiguous and contents byte-identical. To also put
// recovery to work on what a power loss may leave, each row restarts a
// second broker on a copy of the data root whose last index is cut back
// to the bytes its last index fsync covered (the segment bytes of every
// acknowledged entry were fsynced before its answer, so the copy is a
// state a power loss can leave): recovery must index those entries again.

// lazyConf is a broker on root with index-sync lazy, an hour's interval,
// and GET /metrics (for the fsync counters).
func lazyConf(root string) brokerConf {
	return brokerConf{DataDir: root, IndexSync: "lazy", IndexSyncInterval: time.Hour, Metrics: true}
}

// fsyncCounts reads mmmq_fsyncs_total{file="segment"|"index"} from GET
// /metrics: the fsyncs of segment and offset index files since start.
func fsyncCounts(t *testing.T, b *broker) (seg, idx int64) {
	t.Helper()
	m := metricValues(t, b)
	s, ok1 := m[`mmmq_fsyncs_total{file="segment"}`]
	i, ok2 := m[`mmmq_fsyncs_total{file="index"}`]
	if !ok1 || !ok2 {
		t.Fatalf("GET /metrics: the 2 mmmq_fsyncs_total series are not both there")
	}
	return int64(s), int64(i)
}

// metricValues reads GET /metrics (the broker needs Metrics: true): every
// sample line, series (with labels) → value.
func metricValues(t *testing.T, b *broker) map[string]float64 {
	t.Helper()
	resp, err := httpClient.Get(b.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", sc.Text(), err)
		}
		out[f[0]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	return out
}

// powerLossImage copies the data root to a fresh directory and cuts the
// last index of topic there to idxBytes, the length its last index fsync
// covered. It returns the copy's root.
func powerLossImage(t *testing.T, root, topic string, idxBytes int64) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "data")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		dst := filepath.Join(img, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	seg, _ := lastSegment(t, filepath.Join(img, topic))
	if err := os.Truncate(strings.TrimSuffix(seg, ".mmm")+".idx", idxBytes); err != nil {
		t.Fatal(err)
	}
	return img
}

// recoveryReport is what recovery logged it changed, or "clean".
func recoveryReport(b *broker) string {
	var acts []string
	for _, line := range strings.Split(b.logText(), "\n") {
		if i := strings.Index(line, `"actions":[`); i >= 0 && strings.Contains(line, "recovery changed the topic") {
			acts = append(acts, line[i+len(`"actions":`):strings.Index(line[i:], "]")+i+1])
		}
	}
	if len(acts) == 0 {
		return "clean"
	}
	return strings.Join(acts, " ")
}

// checkLog reads topic from b and requires exactly the messages ids at
// offsets 0.., each with the content mustPublish sent (pad bytes).
func checkLog(t *testing.T, b *broker, topic string, want []string, pad int) {
	t.Helper()
	l := mustRead(t, b, topic)
	if got := strings.Join(ids(l), ","); got != strings.Join(want, ",") {
		t.Fatalf("log %s, want %s", got, strings.Join(want, ","))
	}
	for i, s := range l {
		if !bytes.Equal(s.Content, content(want[i], pad)) {
			t.Fatalf("offset %d content %s, sent %s", i, s.Content, content(want[i], pad))
		}
	}
}

// afterReplyBeforeIndexSyncCase: index-sync lazy, DURABLE m0..m2
// acknowledged (3 segment fsyncs, no index fsync: the metrics show it),
// then the broker is killed right after the group commit of m3 answered
// its waiter, its index entry written and not fsynced (m3's HTTP reply may
// or may not have left). Restarted as the kill left it and on a copy whose
// index is cut back to its last fsync (0 bytes): m0..m3 at offsets 0..3,
// byte-identical, every time; the copy's recovery indexes all four again.
func afterReplyBeforeIndexSyncCase(t *testing.T) pointRow {
	const topic = "cp.t"
	root := filepath.Join(t.TempDir(), "data")
	c := lazyConf(root)
	c.Crashpoint, c.CrashAfter = "after-reply-before-index-sync", 4
	b := startBroker(t, c)
	want := []string{"m0", "m1", "m2", "m3"}
	for i, id := range want[:3] {
		if r := mustPublish(t, b, topic, id, "durable"); r.Offset != int64(i) {
			t.Fatalf("%s at offset %d, want %d", id, r.Offset, i)
		}
	}
	if seg, idx := fsyncCounts(t, b); seg != 3 || idx != 0 {
		t.Fatalf("after 3 DURABLE publishes: %d segment and %d index fsyncs, want 3 and 0 (index-sync lazy)", seg, idx)
	}
	r := publish(b.base, topic, "m3", content("m3", 40), "durable")
	if r.Replied && (!r.Ack || r.Offset != 3) {
		t.Fatalf("publish m3: %+v, want ACK at offset 3 or no reply", r)
	}
	if killed, err := b.waitDeath(dieTimeout); err != nil || !killed || !strings.Contains(b.logText(), "crash point") {
		t.Fatalf("broker did not die of SIGKILL at the crash point: killed=%v err=%v\n%s", killed, err, b.logTail())
	}
	seg, _ := lastSegment(t, filepath.Join(root, topic))
	left := segFiles(t, filepath.Join(root, topic))[filepath.Base(strings.TrimSuffix(seg, ".mmm")+".idx")]
	img := powerLossImage(t, root, topic, 0)

	b = startBroker(t, lazyConf(root))
	checkLog(t, b, topic, want, 40)
	asLeft := recoveryReport(b)
	if n := mustPublish(t, b, topic, "m4", "durable"); n.Offset != 4 {
		t.Fatalf("next publish at offset %d, want 4", n.Offset)
	}
	b.stop()

	b = startBroker(t, lazyConf(img))
	act := reindexRE.FindStringSubmatch(b.logText())
	if act == nil || act[1] != "4" || act[2] != "0" {
		t.Fatalf("recovery of the copy with its index cut to 0 bytes did not report indexing 4 entries again from offset 0:\n%s", b.logTail())
	}
	checkLog(t, b, topic, want, 40)
	if n := mustPublish(t, b, topic, "m4", "durable"); n.Offset != 4 {
		t.Fatalf("next publish on the copy at offset %d, want 4", n.Offset)
	}
	b.stop()
	reply := "no reply (killed before the HTTP answer left)"
	if r.Replied {
		reply = fmt.Sprintf("ACK offset %d", r.Offset)
	}
	return pointRow{
		Point:    "after-reply-before-index-sync (index-sync lazy)",
		Expected: "DURABLE acks m0..m3 answered with the index written, not fsynced: after restart m0..m3 intact at their offsets, contiguous, byte-identical; with the index cut back to its last fsync (a power-loss image), recovery indexes them again from the segment",
		Observed: fmt.Sprintf("3 segment fsyncs, 0 index fsyncs before m3; m3: %s; the kill left a %d-byte index; restart: recovery %s, m0..m3 intact, next publish offset 4; index cut to 0 bytes: recovery \"%s\", m0..m3 intact, next publish offset 4",
			reply, left, asLeft, act[0]),
	}
}

// beforeSealIndexSyncCase: index-sync lazy, 1 KiB segments, DURABLE
// publishes of ~270 bytes until the broker is killed where a rotation is
// about to fsync the full segment's index (the next segment not created;
// the publish that triggered the rotation not written, never answered).
// Restarted as the kill left it: every acknowledged entry intact, then
// writes go on and rotations complete, each sealing its segment with the
// whole index. On a copy whose index is cut back to its last fsync (0
// bytes): recovery indexes every entry again; acks intact; the next
// publish rotates.
func beforeSealIndexSyncCase(t *testing.T) pointRow {
	const topic = "cp.t"
	root := filepath.Join(t.TempDir(), "data")
	dir := filepath.Join(root, topic)
	c := lazyConf(root)
	c.SegmentMaxBytes, c.Crashpoint = 1024, "before-seal-index-sync"
	b := startBroker(t, c)
	acked := publishUntilDeath(t, b, topic, 200)
	files := segFiles(t, dir)
	if len(files) != 2 || files["0000000000000000000.mmm"] < 1024 {
		t.Fatalf("after the kill: files %v, want the full first segment only (the next one not created)", files)
	}
	img := powerLossImage(t, root, topic, 0)

	c = lazyConf(root)
	c.SegmentMaxBytes = 1024
	b = startBroker(t, c)
	checkLog(t, b, topic, acked, 200)
	asLeft := recoveryReport(b)
	more, segs := publishUntilSegments(t, b, topic, dir, len(acked), 3)
	// The first rotation sealed the segment the killed process wrote, whose
	// files the restart's repair fsynced (the page cache held them; that
	// fsync is not a writer's and is not counted); the second one a
	// segment written since the restart: in lazy mode that seal fsyncs the
	// index, and nothing else does within the hour.
	if _, idx := fsyncCounts(t, b); idx != 1 {
		t.Fatalf("%d index fsyncs after two rotations, want 1: the seal of the segment written since the restart", idx)
	}
	checkLog(t, b, topic, append(append([]string(nil), acked...), more...), 200)
	b.stop()

	c.DataDir = img
	b = startBroker(t, c)
	act := reindexRE.FindStringSubmatch(b.logText())
	if act == nil || act[1] != fmt.Sprint(len(acked)) || act[2] != "0" {
		t.Fatalf("recovery of the copy with its index cut to 0 bytes did not report indexing %d entries again from offset 0:\n%s", len(acked), b.logTail())
	}
	checkLog(t, b, topic, acked, 200)
	next, _ := publishUntilSegments(t, b, topic, filepath.Join(img, topic), len(acked), 2)
	b.stop()
	return pointRow{
		Point:    "before-seal-index-sync (index-sync lazy)",
		Expected: "killed when a rotation is about to fsync the full segment's index: every DURABLE ack intact, offsets contiguous, byte-identical; writes go on and rotations complete; with the index cut back to its last fsync (a power-loss image), recovery indexes the segment again",
		Observed: fmt.Sprintf("killed at the first rotation after %d DURABLE acks (1 KiB segments); restart: recovery %s, %d acks intact; %d more publishes, %d segments, 1 index fsync by the writer (the seal of the segment written since the restart; the first rotation sealed the killed process's segment, which the restart's repair had fsynced); index cut to 0 bytes: recovery \"%s\", acks intact, the next publish (offset %d) rotated",
			len(acked), asLeft, len(acked), len(more), segs, act[0], len(acked)+len(next)-1),
	}
}

// publishUntilDeath publishes DURABLE messages m0, m1, ... (content padded
// by pad bytes) until one gets no reply and the broker dies of SIGKILL at
// its crash point; each answer must be an ACK at the next offset. It
// returns the acknowledged ids.
func publishUntilDeath(t *testing.T, b *broker, topic string, pad int) []string {
	t.Helper()
	var acked []string
	for i := range 50 {
		id := fmt.Sprintf("m%d", i)
		r := publish(b.base, topic, id, content(id, pad), "durable")
		if !r.Replied {
			if killed, err := b.waitDeath(dieTimeout); err != nil || !killed || !strings.Contains(b.logText(), "crash point") {
				t.Fatalf("broker did not die of SIGKILL at the crash point: killed=%v err=%v\n%s", killed, err, b.logTail())
			}
			return acked
		}
		if !r.Ack || r.Offset != int64(i) {
			t.Fatalf("publish %s: %+v, want ACK at offset %d", id, r, i)
		}
		acked = append(acked, id)
	}
	t.Fatalf("the crash point did not fire within 50 publishes\n%s", b.logTail())
	return nil
}

// publishUntilSegments publishes DURABLE messages n<from>, n<from+1>, ...
// (pad 200) to topic, stored in dir, at offsets from, from+1, ... until
// dir holds want segments, and returns their ids and the segment count. A
// DURABLE answer comes after its group commit, rotation included: no wait
// is needed.
func publishUntilSegments(t *testing.T, b *broker, topic, dir string, from, want int) ([]string, int) {
	t.Helper()
	var out []string
	for i := from; i < from+50; i++ {
		id := fmt.Sprintf("n%d", i)
		if r := mustPublishPad(t, b, topic, id, "durable", 200); r.Offset != int64(i) {
			t.Fatalf("publish %s at offset %d, want %d", id, r.Offset, i)
		}
		out = append(out, id)
		if n := len(segFiles(t, dir)) / 2; n >= want {
			return out, n
		}
	}
	t.Fatalf("fewer than %d segments after 50 publishes", want)
	return nil, 0
}
