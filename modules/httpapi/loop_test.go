package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// TestPublishWithOwnInstanceIDIsALoop: a publish carrying this broker's
// own mmmq-instance-id (pushed by one of its dispatchers) is 508 LOOP with
// a NACK body saying why, on POST /messages, its alias /mmmq/messages and
// /messages/batch, and stores nothing; the same publish from another
// broker (another instance id) or from a producer (no header) is stored.
func TestPublishWithOwnInstanceIDIsALoop(t *testing.T) {
	self, other := contract.NewInstance(), contract.NewInstance()
	if self.ID() == other.ID() || len(self.ID()) != 32 {
		t.Fatalf("instance ids %q and %q: want two different 32-digit ids", self.ID(), other.ID())
	}
	a := newAPI(t, Options{Instance: self}, topicqueue.Options{})
	b := newAPI(t, Options{Instance: other}, topicqueue.Options{}) // another broker
	send := func(s *api, path, body, id string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if id != "" {
			req.Header.Set(contract.HeaderInstanceID, id) // the server canonicalises what the dispatchers send in lower case
			req.Header.Set("mmmq-consumer-id", "fwd")
		}
		rec := httptest.NewRecorder()
		s.s.Handler().ServeHTTP(rec, req)
		return rec
	}
	single := `{"topic":"loop.t","content":{"n":1},"id":"m1"}`
	batch := `[{"topic":"loop.t","content":1},{"topic":"loop.u","content":2}]`
	for _, c := range []struct{ path, body string }{{"/messages", single}, {"/mmmq/messages", single}, {"/messages/batch", batch}} {
		rec := send(a, c.path, c.body, self.ID())
		wantNACK(t, rec, http.StatusLoopDetected, contract.CodeLoop, "loop: pushed by a dispatcher of this broker", "points at this broker itself", `(dispatcher "fwd")`, "nothing was stored")
	}
	a.noTopics()

	for _, c := range []struct{ path, body string }{{"/messages", single}, {"/mmmq/messages", single}, {"/messages/batch", batch}} {
		if rec := send(b, c.path, c.body, self.ID()); rec.Code != http.StatusOK {
			t.Errorf("forwarded to another broker: POST %s = HTTP %d %s, want 200", c.path, rec.Code, rec.Body)
		}
		if rec := send(a, c.path, c.body, ""); rec.Code != http.StatusOK {
			t.Errorf("producer publish: POST %s = HTTP %d %s, want 200", c.path, rec.Code, rec.Body)
		}
	}
}
