package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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
		"rate-limit: 0.001 messages/s over its topics on this node, burst 1 (default)")
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
		"rate-limit: 2.5 messages/s over its topics on this node, burst 10")
	b.fails("mmmq: 400 BAD_REQUEST: invalid dispatcher: ", "dispatchers", "create", "--name", "x", "--host", b.consumer, "--pattern", "a", "--rate-burst", "5")
	// --rate-limit 0 turns the limit off, and its burst with it (update
	// keeps the fields not given; a burst without a limit is refused).
	requireLines(t, "update --rate-limit 0", b.ok("dispatchers", "update", "slow", "--rate-limit", "0"), "rate-limit: off")
	var off admin.Status
	json.Unmarshal([]byte(b.ok("dispatchers", "get", "slow", "--json")), &off)
	if off.RateLimit != nil || off.Spec.RateBurst != 0 {
		t.Fatalf("after --rate-limit 0: rate limit %+v, rate-burst %d; want none and 0", off.RateLimit, off.Spec.RateBurst)
	}
	requireLines(t, "update back", b.ok("dispatchers", "update", "slow", "--rate-limit", "2.5", "--rate-burst", "10"),
		"rate-limit: 2.5 messages/s over its topics on this node, burst 10")

	// get --json, then update --file with it: taken as is (rateLimit,
	// topics and the other read-only members ignored). The same file with
	// rate-limit taken out but rateLimit left in, or with a name in
	// another case, is refused naming the setting.
	shown := b.ok("dispatchers", "get", "slow", "--json")
	file := filepath.Join(t.TempDir(), "slow.json")
	os.WriteFile(file, []byte(shown), 0o600)
	requireLines(t, "update --file from get --json", b.ok("dispatchers", "update", "slow", "--file", file),
		"rate-limit: 2.5 messages/s over its topics on this node, burst 10")
	var edited map[string]any
	if err := json.Unmarshal([]byte(shown), &edited); err != nil || edited["rateLimit"] == nil {
		t.Fatalf("get --json %s: %v; want rateLimit shown", shown, err)
	}
	delete(edited, "rate-limit")
	b2, _ := json.Marshal(edited)
	os.WriteFile(file, b2, 0o600)
	b.fails(`mmmq: 400 BAD_REQUEST: invalid dispatcher: "rateLimit" is read-only (shown by GET); the setting is "rate-limit"`,
		"dispatchers", "update", "slow", "--file", file)
	os.WriteFile(file, []byte(strings.Replace(shown, `"rate-burst"`, `"Rate-Burst"`, 1)), 0o600)
	b.fails(`mmmq: 400 BAD_REQUEST: invalid dispatcher: unknown field "Rate-Burst" (the setting is "rate-burst")`,
		"dispatchers", "update", "slow", "--file", file)
}
