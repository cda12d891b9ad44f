package crashtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// apiDispatchers is GET /mmmq/dispatchers: the names of the api ones.
func apiDispatchers(t *testing.T, b *broker) []string {
	t.Helper()
	resp, err := httpClient.Get(b.base + "/mmmq/dispatchers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Dispatchers []struct {
			Name   string `json:"name"`
			Source string `json:"source"`
		} `json:"dispatchers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range v.Dispatchers {
		if d.Source == "api" {
			out = append(out, d.Name)
		}
	}
	sort.Strings(out)
	return out
}

// createDispatcher POSTs a dispatcher; ok is false when no reply came.
func createDispatcher(b *broker, name string) (status int, ok bool) {
	body := fmt.Sprintf(`{"name":%q,"host":"http://127.0.0.1:9","patterns":["nothing.here"]}`, name)
	resp, err := httpClient.Post(b.base+"/mmmq/dispatchers", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, false
	}
	resp.Body.Close()
	return resp.StatusCode, true
}

// dispatchersFileCase: killed by SIGKILL while the admin API replaces
// dispatchers.json (the new content written and fsynced to the temporary
// file, not yet renamed over the old one). After the restart the broker
// starts (the file is never half-written) with the old set of dispatchers:
// the create that was killed got no reply and is absent; the one before it
// is there.
func dispatchersFileCase(t *testing.T) pointRow {
	root := filepath.Join(t.TempDir(), "data")
	b := startBroker(t, brokerConf{DataDir: root, Crashpoint: "dispatchers-before-rename", CrashAfter: 2})
	if st, ok := createDispatcher(b, "first"); !ok || st != http.StatusCreated {
		t.Fatalf("first create: HTTP %d (replied %v)\n%s", st, ok, b.logTail())
	}
	if st, ok := createDispatcher(b, "second"); ok {
		t.Fatalf("the create at the crash point got a reply: HTTP %d", st)
	}
	if killed, err := b.waitDeath(dieTimeout); err != nil || !killed {
		t.Fatalf("broker did not die of SIGKILL: killed=%v err=%v\n%s", killed, err, b.logTail())
	}
	tmp, _ := os.ReadFile(filepath.Join(root, "dispatchers.json.tmp"))
	b = startBroker(t, brokerConf{DataDir: root}) // fails the test unless the broker starts
	got := apiDispatchers(t, b)
	if strings.Join(got, ",") != "first" {
		t.Fatalf("after restart the api dispatchers are %v, want [first] (the old set)", got)
	}
	if st, ok := createDispatcher(b, "second"); !ok || st != http.StatusCreated {
		t.Fatalf("create after restart: HTTP %d", st)
	}
	b.stop()
	return pointRow{
		Point:    "dispatchers-before-rename",
		Expected: "the create gets no reply; after restart the broker starts with the old dispatchers.json (the new content only in the .tmp file, never a half-written file); the create can be repeated",
		Observed: fmt.Sprintf("second create killed; .tmp held %d bytes naming it: %v; restart: api dispatchers %v; repeated create 201", len(tmp), strings.Contains(string(tmp), `"second"`), got),
	}
}
