package cli

import (
	"strings"
	"testing"
)

// --adaptive-concurrency aimd sets the dispatcher's adaptive concurrency;
// get shows the setting and the limit on the broker; a value other than
// off or aimd, and aimd with max-in-flight 1, are the broker's 400.
func TestDispatchersAdaptiveConcurrency(t *testing.T) {
	b := startCLIBroker(t)
	requireLines(t, "create", b.ok("dispatchers", "create", "--name", "adaptive", "--host", b.consumer, "--pattern", "adaptive.*",
		"--max-in-flight", "8", "--ordering", "none", "--adaptive-concurrency", "aimd"),
		"adaptive-concurrency: aimd: 1..8 pushes outstanding over its topics on this node")
	requireLines(t, "get", b.ok("dispatchers", "get", "adaptive"),
		"concurrency: limit 8 of 8, 0 in flight, lowered 0 times, raised 0 times, round trip 0s")
	for _, args := range [][]string{{"--max-in-flight", "4", "--adaptive-concurrency", "vegas"}, {"--adaptive-concurrency", "aimd"}} {
		out := b.fails("mmmq: 400 BAD_REQUEST: invalid dispatcher: ", append([]string{"dispatchers", "create", "--name", "x", "--host", b.consumer, "--pattern", "a"}, args...)...)
		if !strings.Contains(out, "adaptive-concurrency") {
			t.Errorf("create %v: %q does not name adaptive-concurrency", args, out)
		}
	}
}
