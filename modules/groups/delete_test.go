package groups

import (
	"context"
	"fmt"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
)

// TestTopicDeletionEndsGroupSessions: deleting a topic ends its groups'
// sessions (a waiting long poll returns SESSION_EXPIRED at once, an ack of
// the old session is refused), fetches carry the topic's incarnation id,
// and the topic created again is fetched from offset 0, committed 0,
// under a new incarnation id.
func TestTopicDeletionEndsGroupSessions(t *testing.T) {
	e, ts := newHTTP(t, Options{})
	e.publish(3)
	base := ts.URL + "/topics/" + testTopic + "/groups/g"
	r := do(t, "POST", base+"/fetch?max=10", "", "")
	old, _ := r.body["incarnation"].(string)
	if r.status != 200 || len(r.offsets()) != 3 || len(old) != 32 {
		t.Fatalf("fetch: %d %s", r.status, r.raw)
	}
	s := r.session
	if r := do(t, "POST", base+"/ack", s, `{"offset": 0}`); r.status != 200 {
		t.Fatalf("ack: %d %s", r.status, r.raw)
	}
	waiting := make(chan httpResp, 1)
	go func() { waiting <- do(t, "POST", base+"/fetch?wait=30000", s, "") }()
	<-e.notified // the long poll is waiting on the topic
	if r := do(t, "DELETE", ts.URL+"/topics/"+testTopic, "", ""); r.status != 200 || r.body["deleted"] != true {
		t.Fatalf("delete: %d %s", r.status, r.raw)
	}
	if r := <-waiting; r.status != 409 || r.code() != contract.CodeSessionExpired {
		t.Fatalf("long poll across the deletion: %d %s, want 409 SESSION_EXPIRED", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/ack", s, `{"offset": 2}`); r.status == 200 {
		t.Fatalf("ack of the deleted topic's session accepted: %s", r.raw)
	}
	for i := 0; i < 2; i++ {
		p := []byte(fmt.Sprintf(`{"n":%d}`, i))
		if _, _, err := e.reg.Publish(context.Background(), testTopic, [][]byte{p}, contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	r = do(t, "POST", base+"/fetch?max=10", "", "")
	inc, _ := r.body["incarnation"].(string)
	if r.status != 200 || fmt.Sprint(r.offsets()) != "[0 1]" || r.body["committed"].(float64) != 0 || len(inc) != 32 || inc == old {
		t.Fatalf("fetch of the topic created again: %d %s (old incarnation %s)", r.status, r.raw, old)
	}
}
