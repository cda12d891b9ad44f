package httpapi

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// topicsList is GET /topics decoded.
func (a *api) topicsList() []TopicInfo {
	a.t.Helper()
	rec := a.call(http.MethodGet, "/topics", "", "")
	var out struct{ Topics []TopicInfo }
	decodeJSON(a.t, rec, &out)
	return out.Topics
}

// TestDeleteTopic: DELETE /topics/{t} answers 200 and removes the topic
// (GET /topics no longer lists it, its directory is gone); a publish then
// creates it again at offset 0 with another incarnation id; unknown and
// invalid names are JSON errors (404, 400) that touch nothing.
func TestDeleteTopic(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	for i := 0; i < 3; i++ {
		rec := a.call(http.MethodPost, "/messages", "application/json", `{"topic":"t","content":1}`)
		if rec.Code != http.StatusOK {
			t.Fatalf("publish: %d %s", rec.Code, rec.Body)
		}
	}
	before := a.topicsList()
	if len(before) != 1 || len(before[0].Incarnation) != 32 {
		t.Fatalf("GET /topics before: %+v, want t with a 32-digit incarnation", before)
	}
	rec := a.call(http.MethodDelete, "/topics/t", "", "")
	var del struct {
		Topic   string `json:"topic"`
		Deleted bool   `json:"deleted"`
	}
	decodeJSON(t, rec, &del)
	if rec.Code != http.StatusOK || del.Topic != "t" || !del.Deleted {
		t.Fatalf("DELETE /topics/t: %d %s", rec.Code, rec.Body)
	}
	if l := a.topicsList(); len(l) != 0 {
		t.Fatalf("GET /topics after deletion: %+v", l)
	}
	if _, err := os.Stat(filepath.Join(a.root, "t")); !os.IsNotExist(err) {
		t.Fatalf("topic directory still there: %v", err)
	}
	wantNACK(t, a.call(http.MethodGet, "/topics/t/messages", "", ""), http.StatusNotFound, contract.CodeNotFound)
	wantNACK(t, a.call(http.MethodDelete, "/topics/t", "", ""), http.StatusNotFound, contract.CodeNotFound, `topic "t" does not exist`)
	wantNACK(t, a.call(http.MethodDelete, "/topics/a..b", "", ""), http.StatusBadRequest, contract.CodeBadRequest)
	for _, path := range []string{"/topics/t", "/topics/a..b"} {
		if body := a.call(http.MethodDelete, path, "", "").Body.String(); strings.Contains(body, "topicqueue:") {
			t.Errorf("DELETE %s answers with the package's name: %s", path, body)
		}
	}
	a.noTopics()

	rec = a.call(http.MethodPost, "/messages", "application/json", `{"topic":"t","content":2}`)
	var ack PublishResponse
	decodeJSON(t, rec, &ack)
	if rec.Code != http.StatusOK || ack.Offset == nil || *ack.Offset != 0 {
		t.Fatalf("publish after deletion: %d %s, want offset 0", rec.Code, rec.Body)
	}
	after := a.topicsList()
	if len(after) != 1 || after[0].NextOffset != 1 || len(after[0].Incarnation) != 32 || after[0].Incarnation == before[0].Incarnation {
		t.Fatalf("GET /topics after re-creation: %+v; old incarnation %s", after, before[0].Incarnation)
	}
}

// TestTopicBusyIs409: the registry's busy error is 409 TOPIC_BUSY on the
// wire.
func TestTopicBusyIs409(t *testing.T) {
	c := contract.Classify(fmt.Errorf("x: %w", topicqueue.ErrTopicBusy))
	if c.Status != http.StatusConflict || c.Code != contract.CodeTopicBusy {
		t.Fatalf("ErrTopicBusy classified %+v", c)
	}
}
