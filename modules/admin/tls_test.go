package admin

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/servertls/tlstest"
)

// A dispatcher's tls entry is taken through the API, shown by GET (paths
// only) and kept in dispatchers.json; an http host or an unreadable file
// is a 400 naming the field.
func TestDispatcherTLSThroughTheAPI(t *testing.T) {
	l := startAdmin(t, newRegistry(t), t.TempDir())
	ca := tlstest.NewCA(t, "consumer ca")
	dir := t.TempDir()
	caFile := ca.WriteCA(t, dir, "ca.pem")
	cert, key := ca.Client(t, "mmmq").Write(t, dir, "client")
	tlsJSON := fmt.Sprintf(`{"ca-file":%q,"cert-file":%q,"key-file":%q,"server-name":"billing.internal"}`, caFile, cert, key)
	body := `{"name":"billing","host":"https://localhost:8443","patterns":["order.**"],"tls":` + tlsJSON + `}`
	var got Spec
	l.must("POST", "/mmmq/dispatchers", body, 201, &got)
	want := dispatcher.TLSSettings{CAFile: caFile, CertFile: cert, KeyFile: key, ServerName: "billing.internal"}
	if got.TLS != want {
		t.Fatalf("created tls %+v; want %+v", got.TLS, want)
	}
	var stored struct{ Dispatchers []Spec }
	if err := json.Unmarshal([]byte(l.fileText()), &stored); err != nil || len(stored.Dispatchers) != 1 ||
		stored.Dispatchers[0].TLS != want {
		t.Fatalf("dispatchers.json: %v %s", err, l.fileText())
	}
	for _, tc := range []struct{ body, want string }{
		{strings.Replace(body, "https://", "http://", 1), "tls: applies to an https host only"},
		{strings.Replace(body, caFile, dir+"/missing.pem", 1), "tls.ca-file: open " + dir + "/missing.pem"},
		{strings.Replace(body, `"key-file"`, `"keyfile"`, 1), `unknown field \"keyfile\"`},
	} {
		st, out := l.call("PUT", "/mmmq/dispatchers/billing", tc.body)
		if st != 400 || !strings.Contains(out, tc.want) || !strings.Contains(out, `"code":"BAD_REQUEST"`) {
			t.Errorf("PUT %s: %d %s; want 400 containing %q", tc.body, st, out, tc.want)
		}
	}
}
