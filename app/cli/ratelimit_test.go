package cli

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/admin"
)

// --rate-limit and --rate-burst set the dispatcher's rate limit; get shows
// the setting and, on the broker, the topics waiting for tokens; a burst
// without a limit is the broker's 400 naming rate-burst.
func TestDispatchersRateLimit(t *testing.T) {
	b := startCLIBroker(t)
	requireLines(t, "create", b.ok("dispatchers", "create", "--name", "slow", "--host", b.consumer, "--pattern", "slow.*", "--rate-limit", "0.001"),
		"rate-limit: 0.001 messages/s over its topics on this node, bursts of default: 1")
	b.publish("slow.a", 2)
	var st admin.Status
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		json.Unmarshal([]byte(b.ok("dispatchers", "get", "slow", "--json")), &st)
		if st.RateLimit != nil && st.RateLimit.Waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no topic waiting for tokens: %+v", st)
		}
	}
	requireLines(t, "get", b.ok("dispatchers", "get", "slow"), "rate limit: 0.001 messages/s, burst 1: 1 topics waiting for tokens")
	requireLines(t, "update", b.ok("dispatchers", "update", "slow", "--rate-limit", "2.5", "--rate-burst", "10"),
		"rate-limit: 2.5 messages/s over its topics on this node, bursts of 10")
	b.fails("mmmq: 400 BAD_REQUEST: invalid dispatcher: ", "dispatchers", "create", "--name", "x", "--host", b.consumer, "--pattern", "a", "--rate-burst", "5")
}
