package admin

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/dispatcher/dispatchertest"
)

// Every dispatcher setting's error names its field: a create with one bad
// value is a 400 whose error has the field's name in it, for every
// setting (the table covers each JSON member of the settings: checked
// below, so a setting added later without a row fails).
func TestEverySettingErrorNamesItsField(t *testing.T) {
	l := startAdmin(t, newRegistry(t), t.TempDir())
	for _, tc := range dispatchertest.BadSettings {
		member := tc.Value
		head, rest, nested := strings.Cut(tc.Field, ".")
		if nested {
			member = fmt.Sprintf(`{%q:%s}`, rest, tc.Value)
		}
		body := fmt.Sprintf(`{"name":"d","host":"https://127.0.0.1:1","patterns":["a"],%q:%s}`, head, member)
		code, out := l.call("POST", "/mmmq/dispatchers", body)
		if code != 400 || !strings.Contains(out, tc.Field) {
			t.Errorf("%s = %s: %d %s; want a 400 naming %q", tc.Field, tc.Value, code, out, tc.Field)
		}
	}
	covered := map[string]bool{"name": true, "host": true, "patterns": true, "tls": true}
	for _, tc := range dispatchertest.BadSettings {
		head, _, _ := strings.Cut(tc.Field, ".")
		covered[head] = true
	}
	st := reflect.TypeFor[dispatcher.Settings]()
	for f := range st.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !covered[name] {
			t.Errorf("setting %q has no bad value in the table", name)
		}
	}
}
