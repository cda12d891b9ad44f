package crashtest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The rows of this file are about the last segment's unindexed tail: the
// entries a crash left in the segment file after its last index entry.
// Recovery indexes again every CRC-valid entry there that starts where the
// previous one ends; at the first position that holds no valid entry it
// byte-scans the rest of the file: nothing valid after it is a torn tail,
// cut; a valid entry after it is damage, and the topic is refused.

// entryHeader is the size of an entry's header in a segment file: int32 BE
// length (of what follows it) | uint32 CRC32C of the JSON.
const entryHeader = 8

// Recovery's report lines (modules/storage repair), as the broker logs them.
var (
	reindexRE  = regexp.MustCompile(`index again ([0-9]+) entries of [0-9]+\.mmm from offset ([0-9]+) \(valid in the segment after the last index entry\)`)
	truncateRE = regexp.MustCompile(`truncate [0-9]+\.mmm from ([0-9]+) to ([0-9]+) bytes \(torn tail after the last valid entry\)`)
)

// tailEntry is an entry found in a segment beyond what its index vouches for.
type tailEntry struct {
	Offset int64 // the offset it has once indexed
	ID     string
	Pos    int64  // byte position in the segment file
	Raw    []byte // the whole entry, header included
}

// lastSegment returns the path of the last segment file (.mmm) of
// topicDir and its base offset.
func lastSegment(t *testing.T, topicDir string) (string, int64) {
	t.Helper()
	var mmms []string
	for name := range segFiles(t, topicDir) {
		if strings.HasSuffix(name, ".mmm") {
			mmms = append(mmms, name)
		}
	}
	sort.Strings(mmms)
	if len(mmms) == 0 {
		t.Fatalf("no segment in %s", topicDir)
	}
	last := mmms[len(mmms)-1]
	var base int64
	if _, err := fmt.Sscanf(strings.TrimSuffix(last, ".mmm"), "%d", &base); err != nil {
		t.Fatalf("segment name %s: %v", last, err)
	}
	return filepath.Join(topicDir, last), base
}

// segmentTail decodes the last segment of topicDir from disk (entry format:
// int32 BE length | uint32 CRC32C | JSON, see modules/storage; the CRC is
// not checked) and returns the entries past the last index entry, with the
// offsets they would have once indexed, and how many bytes they take.
func segmentTail(t *testing.T, topicDir string) ([]tailEntry, int64) {
	t.Helper()
	path, base := lastSegment(t, topicDir)
	seg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := os.ReadFile(strings.TrimSuffix(path, ".mmm") + ".idx")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	indexed := int64(len(idx) / 8)
	var out []tailEntry
	var tailBytes int64
	pos, n := 0, int64(0)
	for pos+entryHeader <= len(seg) {
		l := int(binary.BigEndian.Uint32(seg[pos:]))
		if l < 6 || pos+4+l > len(seg) {
			break
		}
		if n >= indexed {
			s, _ := parseStored(seg[pos+entryHeader : pos+4+l])
			out = append(out, tailEntry{Offset: base + n, ID: s.ID, Pos: int64(pos), Raw: append([]byte(nil), seg[pos:pos+4+l]...)})
			tailBytes += int64(4 + l)
		}
		pos += 4 + l
		n++
	}
	return out, tailBytes
}

// m3Tail kills a fresh broker at point while it commits m3 (crashOnM3,
// DURABLE) and requires what the kill must leave on disk: m0..m2 indexed
// and m3 complete in the last segment after them, not indexed. It returns
// the data root, the segment's path and m3's entry.
func m3Tail(t *testing.T, point, topic string) (string, string, tailEntry) {
	t.Helper()
	root := crashOnM3(t, point, topic, "durable")
	dir := filepath.Join(root, topic)
	tail, _ := segmentTail(t, dir)
	if len(tail) != 1 || tail[0].ID != "m3" || tail[0].Offset != 3 {
		t.Fatalf("segment tail on disk after the kill: %+v, want m3 at offset 3 written but not indexed", tail)
	}
	seg, _ := lastSegment(t, dir)
	if fi, err := os.Stat(seg); err != nil || fi.Size() != tail[0].Pos+int64(len(tail[0].Raw)) {
		t.Fatalf("m3 does not end the segment %s: %v", seg, err)
	}
	return root, seg, tail[0]
}

// retryAsDuplicate is the producer's retry of m3 (same id and content,
// DURABLE) to a broker restarted after m3's publish got no reply: the
// idempotent-publish window, rebuilt from the log, must answer it as the
// duplicate at offset 3 and store nothing, and the log must read m0..m3,
// m3 byte-identical to what was sent.
func retryAsDuplicate(t *testing.T, b *broker, topic string) (pubResult, []stored) {
	t.Helper()
	retry := mustPublish(t, b, topic, "m3", "durable")
	l := mustRead(t, b, topic)
	if got := strings.Join(ids(l), ","); got != "m0,m1,m2,m3" || retry.Offset != 3 || !retry.Duplicate {
		t.Fatalf("after restart and retry the log holds %s (retry at %d, duplicate %t), want m0,m1,m2,m3 (retry answered as the duplicate at 3)",
			got, retry.Offset, retry.Duplicate)
	}
	if !bytes.Equal(l[3].Content, content("m3", 40)) {
		t.Fatalf("offset 3 holds %s, sent %s", l[3].Content, content("m3", 40))
	}
	return retry, l
}

// reindexedTailCase: the kill comes after m3's segment write (page cache)
// or its fsync, before the index write. m3 is complete in the segment
// after the last index entry: recovery indexes it again and it is visible
// at offset 3 although its publisher got no reply (at least once, as for a
// lost reply). The producer's retry with the same id is answered as the
// duplicate, and the log goes on at offset 4.
func reindexedTailCase(t *testing.T, point string) pointRow {
	const topic = "cp.t"
	root, _, m3 := m3Tail(t, point, topic)
	b := startBroker(t, brokerConf{DataDir: root})
	act := reindexRE.FindStringSubmatch(b.logText())
	if act == nil || act[1] != "1" || act[2] != "3" {
		t.Fatalf("recovery did not report indexing m3 again (want \"index again 1 entries of ... from offset 3\"):\n%s", b.logTail())
	}
	retry, l := retryAsDuplicate(t, b, topic)
	if r := mustPublish(t, b, topic, "m4", "durable"); r.Offset != 4 {
		t.Fatalf("next publish at offset %d, want 4", r.Offset)
	}
	b.stop()
	return pointRow{
		Point:    point,
		Expected: "no reply; the entry is complete in the segment after the last index entry: recovery indexes it again and reports it, it is visible at its offset (at least once, as for a lost reply); the retry with the same id is answered as the duplicate; earlier DURABLE intact",
		Observed: fmt.Sprintf("m3 got no reply; on disk %d bytes of m3 past the index; restart: recovery \"%s\"; log ids %v; retry ACK offset %d duplicate=%t; next publish took offset 4",
			len(m3.Raw), act[0], ids(l), retry.Offset, retry.Duplicate),
	}
}

// tornTailCase: the log-queue study's "partial write truncated" experiment.
// The broker is killed after m3's segment write, then the test cuts the
// last 10 bytes of the segment file: what a torn write leaves (m3's
// header and part of its JSON). Recovery finds no valid entry in the tail,
// cuts it and reports it; m3 is gone and its offset is free again.
func tornTailCase(t *testing.T) pointRow {
	const topic = "cp.t"
	root, seg, m3 := m3Tail(t, "after-segment-write", topic)
	end := m3.Pos + int64(len(m3.Raw))
	if err := os.Truncate(seg, end-10); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, brokerConf{DataDir: root})
	l := mustRead(t, b, topic)
	if got := strings.Join(ids(l), ","); got != "m0,m1,m2" {
		t.Fatalf("after restart the log holds %s, want m0,m1,m2 (the torn m3 cut)", got)
	}
	act := truncateRE.FindStringSubmatch(b.logText())
	want := []string{fmt.Sprint(end - 10), fmt.Sprint(m3.Pos)}
	if act == nil || act[1] != want[0] || act[2] != want[1] {
		t.Fatalf("recovery did not report the truncation from %s to %s bytes:\n%s", want[0], want[1], b.logTail())
	}
	if reindexRE.MatchString(b.logText()) {
		t.Fatalf("recovery indexed a torn entry again:\n%s", b.logTail())
	}
	if fi, err := os.Stat(seg); err != nil || fi.Size() != m3.Pos {
		t.Fatalf("segment after recovery: %v, want %d bytes", err, m3.Pos)
	}
	if r := mustPublish(t, b, topic, "m4", "durable"); r.Offset != 3 {
		t.Fatalf("next publish at offset %d, want 3", r.Offset)
	}
	b.stop()
	return pointRow{
		Point:    "after-segment-write, then the test cuts the last 10 bytes of the segment (a torn write)",
		Expected: "the torn entry (no reply) is not visible after restart: a tail with no valid entry is truncated and reported; earlier DURABLE intact; its offset is taken by the next publish (the log-queue study's partial-write-truncated experiment)",
		Observed: fmt.Sprintf("m3 got no reply; the test cut the segment from %d to %d bytes; restart: recovery \"%s\"; log = m0..m2 intact, m3 absent; next publish took offset 3",
			end, end-10, act[0]),
	}
}

// damagedTailCase: the broker is killed after m3's segment write; the test
// then flips one byte inside m3's JSON (its CRC no longer matches) and
// appends a valid entry after it (m3's original bytes): the shape a group
// commit that never completed its fsync leaves when a later page of it
// reached the disk and an earlier one did not. That is crash damage, not
// corruption: the valid entry lies within one group commit (MaxGroupBytes)
// of the invalid one, so recovery cuts both, counts the valid entry it
// cut, and the broker serves m0..m2.
func damagedTailCase(t *testing.T) pointRow {
	const topic = "cp.t"
	root, seg, m3 := m3Tail(t, "after-segment-write", topic)
	flip, valid := damageM3(t, seg, m3, 1)
	b := startBroker(t, brokerConf{DataDir: root, OnCorruption: "fail", Metrics: true})
	l := mustRead(t, b, topic)
	if got := strings.Join(ids(l), ","); got != "m0,m1,m2" {
		t.Fatalf("after restart the log holds %s, want m0,m1,m2 (the torn group of m3 and the valid entry after it cut)", got)
	}
	m := metricValues(t, b)
	if m["mmmq_recovery_cut_valid_entries_total"] != 1 || m[`mmmq_recovery_cut_bytes_total{file="segment"}`] != float64(2*len(m3.Raw)) {
		t.Fatalf("/metrics after recovery: cut_valid_entries %v, cut_bytes{segment} %v; want 1 and %d",
			m["mmmq_recovery_cut_valid_entries_total"], m[`mmmq_recovery_cut_bytes_total{file="segment"}`], 2*len(m3.Raw))
	}
	rec := logRecord(t, b, "recovery changed the topic: cut what a crash left torn, indexed again what the offset index lacked")
	if rec["topic"] != topic || rec["cut-valid-entries"] != float64(1) || rec["truncated-bytes"] != float64(2*len(m3.Raw)) {
		t.Fatalf("recovery logged %v; want topic %s, cut-valid-entries 1, truncated-bytes %d", rec, topic, 2*len(m3.Raw))
	}
	if r := mustPublish(t, b, topic, "m4", "durable"); r.Offset != 3 {
		t.Fatalf("next publish at offset %d, want 3", r.Offset)
	}
	b.stop()
	return pointRow{
		Point:    "after-segment-write, then the test flips a byte of the unindexed entry and appends a valid entry after it",
		Expected: "a hole followed by data within one group commit is crash damage (unsynced bytes written back out of order): cut at the first invalid byte, the valid entry after it counted; earlier DURABLE intact",
		Observed: fmt.Sprintf("byte %d of m3 flipped, a valid entry appended at byte %d; restart: log = m0..m2, recovery logged cut-valid-entries %v, truncated-bytes %v; next publish took offset 3",
			flip, valid, rec["cut-valid-entries"], rec["truncated-bytes"]),
	}
}

// damageM3 flips one byte inside m3's JSON in the segment seg and appends
// copies of m3's original (valid) entry after it: copies of them, until at
// least minBytes were appended. It returns the flipped byte and the
// position of the first copy.
func damageM3(t *testing.T, seg string, m3 tailEntry, minBytes int) (flip, valid int64) {
	t.Helper()
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	flip = m3.Pos + entryHeader + int64(len(m3.Raw)-entryHeader)/2
	data[flip] ^= 0x20
	valid = m3.Pos + int64(len(m3.Raw))
	for appended := 0; appended < minBytes; appended += len(m3.Raw) {
		data = append(data, m3.Raw...)
	}
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return flip, valid
}

// damagedBeyondGroupCase: as damagedTailCase, but the valid entries after
// the damaged m3 run on for more than one group commit can leave unsynced
// (MaxGroupBytes, 1 MiB): such data had been fsynced, so the damage before
// it is corruption. With on-corruption fail the broker refuses to start,
// naming the topic, the segment file, the byte position and the offset,
// and leaves the files untouched.
func damagedBeyondGroupCase(t *testing.T) pointRow {
	const topic = "cp.t"
	const window = 1 << 20 // storage.DamageWindow for an entry of m3's size
	root, seg, m3 := m3Tail(t, "after-segment-write", topic)
	flip, valid := damageM3(t, seg, m3, window+4*len(m3.Raw))
	size := int64(len(m3.Raw))
	beyond := valid + (m3.Pos+window-valid+size-1)/size*size // the first copy at or beyond m3.Pos + window
	before := snapshotFiles(t, filepath.Join(root, topic))
	b := startBroker(t, brokerConf{DataDir: root, OnCorruption: "fail", MayDieStarting: true})
	if b.alive() {
		t.Fatalf("the broker started (ready) with a damaged entry before more than a group commit of valid ones\n%s", b.logTail())
	}
	if code := b.exitCode(); code != 1 {
		t.Fatalf("broker with a damaged entry before a valid one: exit status %d, want 1 (refused to start)\n%s", code, b.logTail())
	}
	rec := logRecord(t, b, "topic refused: corruption found by startup recovery; files left untouched")
	reason := fmt.Sprintf("entry at byte %d is invalid", m3.Pos)
	follows := fmt.Sprintf("but a valid entry follows at byte %d", beyond)
	if rec["topic"] != topic || rec["file"] != seg || rec["pos"] != float64(m3.Pos) || rec["offset"] != float64(3) ||
		!strings.Contains(fmt.Sprint(rec["reason"]), reason) || !strings.Contains(fmt.Sprint(rec["reason"]), follows) {
		t.Fatalf("refusal logged as %v; want topic %s, file %s, pos %d, offset 3, reason %q ... %q", rec, topic, seg, m3.Pos, reason, follows)
	}
	where := fmt.Sprintf("%s byte %d (offset 3)", seg, m3.Pos)
	if !strings.Contains(b.logText(), where) {
		t.Fatalf("the startup error does not name %q:\n%s", where, b.logTail())
	}
	if after := snapshotFiles(t, filepath.Join(root, topic)); !equalFiles(before, after) {
		t.Fatal("recovery modified the files of the refused topic")
	}
	return pointRow{
		Point:    "after-segment-write, then the test flips a byte of the unindexed entry and appends over 1 MiB of valid entries after it",
		Expected: "a valid entry more than one group commit (1 MiB) after an invalid one lies in fsynced data: damage, not a torn write; with on-corruption fail the broker refuses to start, naming topic, file, byte and offset; files untouched",
		Observed: fmt.Sprintf("byte %d of m3 flipped, valid entries appended from byte %d; start refused, exit status 1: \"%s\" (pos %d, offset 3); files byte-identical",
			flip, valid, rec["reason"], m3.Pos),
	}
}

// logRecord returns the first JSON log line of b whose message is msg.
func logRecord(t *testing.T, b *broker, msg string) map[string]any {
	t.Helper()
	for _, line := range strings.Split(b.logText(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			return rec
		}
	}
	t.Fatalf("no log line %q:\n%s", msg, b.logTail())
	return nil
}

// snapshotFiles reads every regular file directly in dir.
func snapshotFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range es {
		if e.Type().IsRegular() {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = data
		}
	}
	return out
}

func equalFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for name, data := range a {
		if other, ok := b[name]; !ok || !bytes.Equal(data, other) {
			return false
		}
	}
	return true
}
