package crashtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// topicInfo is one topic of GET /topics, the fields the tests read.
type topicInfo struct {
	Name        string `json:"name"`
	Incarnation string `json:"incarnation"`
	StartOffset int64  `json:"startOffset"`
}

// listTopics is GET /topics of b.
func listTopics(t *testing.T, b *broker) []topicInfo {
	t.Helper()
	resp, err := httpClient.Get(b.base + "/topics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Topics []topicInfo `json:"topics"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET /topics: %d %v", resp.StatusCode, err)
	}
	return v.Topics
}

// topicIncarnations is GET /topics: name → incarnation id.
func topicIncarnations(t *testing.T, b *broker) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, q := range listTopics(t, b) {
		out[q.Name] = q.Incarnation
	}
	return out
}

// deleteCase: killed by SIGKILL at point of a DELETE /topics/{topic}
// (fired on hit after). After the restart, recovery accepts the data root,
// the topic is either whole (same messages, same incarnation id) or absent,
// no renamed-aside directory is left, and the other topic is untouched.
func deleteCase(t *testing.T, point string, after int) pointRow {
	const topic, other = "del.t", "del.other"
	root := filepath.Join(t.TempDir(), "data")
	b := startBroker(t, brokerConf{DataDir: root, Crashpoint: point, CrashAfter: after, SegmentMaxBytes: 1024})
	for i := range 30 {
		mustPublish(t, b, topic, fmt.Sprintf("m%d", i), "durable")
	}
	mustPublish(t, b, other, "o0", "durable")
	before := mustRead(t, b, topic)
	inc := topicIncarnations(t, b)[topic]
	req, _ := http.NewRequest(http.MethodDelete, b.base+"/topics/"+topic, nil)
	if resp, err := httpClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("DELETE at the crash point got a reply: HTTP %d", resp.StatusCode)
	}
	if killed, err := b.waitDeath(dieTimeout); err != nil || !killed {
		t.Fatalf("broker did not die of SIGKILL at %s: killed=%v err=%v\n%s", point, killed, err, b.logTail())
	}

	b = startBroker(t, brokerConf{DataDir: root, SegmentMaxBytes: 1024}) // fails the test unless recovery accepts the root
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".deleting-") {
			t.Fatalf("restart left %s in the data root", e.Name())
		}
	}
	after2 := mustRead(t, b, topic)
	state := "absent"
	switch {
	case len(after2) == 0:
		if _, err := os.Stat(filepath.Join(root, topic)); !os.IsNotExist(err) {
			t.Fatalf("topic reads empty but its directory is there: %v", err)
		}
	case strings.Join(ids(after2), ",") == strings.Join(ids(before), ",") && topicIncarnations(t, b)[topic] == inc:
		state = "whole"
	default:
		t.Fatalf("topic neither whole nor absent after restart: ids %v (before %v), incarnation %s (before %s)",
			ids(after2), ids(before), topicIncarnations(t, b)[topic], inc)
	}
	if o := mustRead(t, b, other); len(o) != 1 {
		t.Fatalf("other topic after restart: %v", ids(o))
	}
	// Publishing again creates the topic anew (or appends to the whole one).
	r := mustPublish(t, b, topic, "new", "durable")
	b.stop()
	return pointRow{
		Point:    point,
		Expected: "no reply; after restart recovery accepts the data root, the topic is whole (same messages and incarnation id) or absent, no .deleting- directory left",
		Observed: fmt.Sprintf("topic %s after restart (%d messages before); next publish at offset %d", state, len(before), r.Offset),
	}
}
