package groups

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// A consumer-group fetch returns each message with the ordering key it
// was published with (and none for a message published without one).
func TestHTTPFetchReturnsTheKey(t *testing.T) {
	_, ts := newHTTP(t, Options{})
	for _, body := range []string{
		`{"topic":"` + testTopic + `","content":1,"key":"customer-7"}`,
		`{"topic":"` + testTopic + `","content":2}`,
	} {
		resp, err := http.Post(ts.URL+"/messages", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("publish %s: HTTP %d", body, resp.StatusCode)
		}
	}
	r := do(t, "POST", ts.URL+"/topics/"+testTopic+"/groups/g/fetch?max=10", "", "")
	if r.status != 200 {
		t.Fatalf("fetch: %d %s", r.status, r.raw)
	}
	var keys []string
	for _, m := range r.body["messages"].([]any) {
		msg := m.(map[string]any)["message"].(map[string]any)
		k, ok := msg["key"].(string)
		if !ok {
			k = "-"
		}
		keys = append(keys, k)
	}
	if got := fmt.Sprint(keys); got != "[customer-7 -]" {
		t.Errorf("keys fetched %s, want [customer-7 -] (%s)", got, r.raw)
	}
}
