package crashtest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// acceptedProducers is how many producers publish ACCEPTED at once in
// acceptedNotStableCase; each has at most one publish without an answer.
const acceptedProducers = 6

// acceptedNotStableCase is the log-queue study's accepted_offset_not_stable
// experiment. ACCEPTED is answered as soon as the entry is queued in
// memory, before anything is written: the answer promises neither an
// offset nor survival. Six producers publish ACCEPTED to one topic and the
// broker is killed at after-segment-sync of a group commit: that batch's
// segment bytes are fsynced, its index is not written, and entries
// answered ACCEPTED meanwhile wait in memory behind it.
//
// What must hold: the victims (answered ACCEPTED, queued, never written:
// the test finds none of their ids in the topic's files after the kill)
// are absent after the restart, and the offsets they could have had go to
// other messages. Everything below the restarted high watermark is on
// disk and a victim is not, and at most victims + 6 entries (one publish
// without an answer per producer) were queued behind the killed batch, so
// the next victims + 6 publishes take every offset a victim could have
// had. The entries of the killed batch, complete on disk, are indexed
// again and visible at their offsets, byte-identical, answered or not.
// Up to 8 attempts, until a kill finds an answered entry still queued
// (one attempt in six or so finds none).
func acceptedNotStableCase(t *testing.T) pointRow {
	const topic = "cp.t"
	for attempt := 1; attempt <= 8; attempt++ {
		root := filepath.Join(t.TempDir(), "data")
		dir := filepath.Join(root, topic)
		b := startBroker(t, brokerConf{DataDir: root, Crashpoint: "after-segment-sync", CrashAfter: 6})
		mustPublish(t, b, topic, "d0", "durable")
		answered := acceptedLoad(t, b, topic)
		if killed, err := b.waitDeath(dieTimeout); err != nil || !killed {
			t.Fatalf("broker did not die of SIGKILL: %v %v", killed, err)
		}
		tail, _ := segmentTail(t, dir)
		victims, onDisk := notOnDisk(t, dir, answered)
		if len(tail) == 0 || len(victims) == 0 {
			t.Logf("attempt %d: killed batch of %d entries, %d answered ACCEPTED entries not on disk; again", attempt, len(tail), len(victims))
			continue
		}
		b = startBroker(t, brokerConf{DataDir: root})
		hw := checkKilledBatch(t, b, topic, tail, onDisk, victims)
		takers := len(victims) + acceptedProducers
		for i := range takers {
			if r := mustPublish(t, b, topic, fmt.Sprintf("b%d", i), "durable"); r.Offset != hw+int64(i) {
				t.Fatalf("publish b%d after the restart at offset %d, want %d", i, r.Offset, hw+int64(i))
			}
		}
		l := mustRead(t, b, topic)
		b.stop()
		if bad := idsIn(l, victims); len(bad) > 0 {
			t.Fatalf("answered ACCEPTED entries never written are in the log: %v", bad)
		}
		answeredInBatch := 0
		for _, e := range tail {
			if answered[e.ID] {
				answeredInBatch++
			}
		}
		return pointRow{
			Point:    "accepted-offset-not-stable",
			Expected: "ACCEPTED is answered when the entry is queued, without an offset; an answered entry still queued in memory when the process dies is absent after restart and the offsets it could have had belong to other messages (the log-queue study's accepted_offset_not_stable experiment); entries of the killed batch complete on disk are indexed again and visible",
			Observed: fmt.Sprintf("attempt %d: killed at after-segment-sync of a batch of %d entries (%d of them answered ACCEPTED): all indexed again, visible at offsets %d..%d; %d answered ACCEPTED entries queued behind it (e.g. %s) found nowhere on disk, absent after restart; offsets %d..%d (every offset they could have had) now hold later DURABLE messages",
				attempt, len(tail), answeredInBatch, tail[0].Offset, hw-1, len(victims), victims[0], hw, hw+int64(takers)-1),
		}
	}
	t.Fatal("no attempt killed the broker with an answered ACCEPTED entry still queued")
	return pointRow{}
}

// acceptedLoad runs acceptedProducers producers publishing ACCEPTED to
// topic until the broker dies (a publish without an answer) and returns
// the ids answered ACCEPTED.
func acceptedLoad(t *testing.T, b *broker, topic string) map[string]bool {
	t.Helper()
	var (
		mu       sync.Mutex
		answered = map[string]bool{}
		wg       sync.WaitGroup
	)
	for g := range acceptedProducers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 500 {
				id := fmt.Sprintf("a%d-%03d", g, n)
				r := publish(b.base, topic, id, content(id, 40), "accepted")
				if !r.Replied {
					return
				}
				if !r.Ack || r.Offset != -1 || r.Level != "ACCEPTED" {
					t.Errorf("accepted publish %s: %+v", id, r)
					return
				}
				mu.Lock()
				answered[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return answered
}

// notOnDisk splits the ids of answered: those whose quoted id occurs in
// none of the segment files of topicDir (sorted) and those that do.
func notOnDisk(t *testing.T, topicDir string, answered map[string]bool) ([]string, map[string]bool) {
	t.Helper()
	var all []byte
	for name := range segFiles(t, topicDir) {
		if strings.HasSuffix(name, ".mmm") {
			data, err := os.ReadFile(filepath.Join(topicDir, name))
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, data...)
		}
	}
	var victims []string
	onDisk := map[string]bool{}
	for id := range answered {
		if bytes.Contains(all, []byte(`"`+id+`"`)) {
			onDisk[id] = true
		} else {
			victims = append(victims, id)
		}
	}
	sort.Strings(victims)
	return victims, onDisk
}

// checkKilledBatch checks the restarted broker b against what the kill left
// on disk: recovery indexed the killed batch (tail) again and reported it;
// each of its entries is visible at its offset, byte-identical; the log
// ends with it; every answered id on disk (onDisk) is in the log and no
// victim is. It returns the high watermark.
func checkKilledBatch(t *testing.T, b *broker, topic string, tail []tailEntry, onDisk map[string]bool, victims []string) int64 {
	t.Helper()
	act := reindexRE.FindStringSubmatch(b.logText())
	if act == nil || act[1] != fmt.Sprint(len(tail)) || act[2] != fmt.Sprint(tail[0].Offset) {
		t.Fatalf("recovery did not report indexing the killed batch again (%d entries from offset %d):\n%s", len(tail), tail[0].Offset, b.logTail())
	}
	l := mustRead(t, b, topic)
	hw := int64(len(l))
	if last := tail[len(tail)-1].Offset; hw != last+1 {
		t.Fatalf("high watermark %d after restart, want %d (the end of the killed batch)", hw, last+1)
	}
	for _, e := range tail {
		if !bytes.Equal(l[e.Offset].Raw, e.Raw[entryHeader:]) {
			t.Fatalf("offset %d holds %s, the killed batch had %s there", e.Offset, l[e.Offset].Raw, e.Raw[entryHeader:])
		}
	}
	present := map[string]bool{}
	for _, s := range l {
		present[s.ID] = true
	}
	for id := range onDisk {
		if !present[id] {
			t.Fatalf("%s, answered ACCEPTED and complete on disk, is not in the log after restart", id)
		}
	}
	if bad := idsIn(l, victims); len(bad) > 0 {
		t.Fatalf("answered ACCEPTED entries never written are in the log after restart: %v", bad)
	}
	return hw
}

// idsIn returns the ids of want that occur in l.
func idsIn(l []stored, want []string) []string {
	w := map[string]bool{}
	for _, id := range want {
		w[id] = true
	}
	var out []string
	for _, s := range l {
		if w[s.ID] {
			out = append(out, s.ID)
		}
	}
	return out
}
