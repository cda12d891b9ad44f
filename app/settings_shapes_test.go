package app_test

import (
	"os"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/mmmq/mmmq/modules/dispatcher"
)

// Every key of dispatcher.Settings is documented in the OpenAPI schema of
// the admin API's body (DispatcherSpec, nested entries by reference) and in
// the commented mmmq.broker.dispatchers entry of configs/mmmq.yaml; adding
// a key to Settings fails here until both documents have it.
func TestSettingsShapesDocumented(t *testing.T) {
	spec := loadOpenAPI(t).Components.Schemas["DispatcherSpec"]
	if spec == nil || spec.Value == nil {
		t.Fatalf("%s: no components.schemas.DispatcherSpec", openAPIFile)
	}
	for _, key := range dispatcher.SettingsKeys() {
		s := spec.Value
		for _, seg := range strings.Split(key, ".") {
			var p *openapi3.SchemaRef
			if s != nil {
				p = s.Properties[seg]
			}
			if p == nil || p.Value == nil {
				s = nil
				break
			}
			s = p.Value
		}
		if s == nil {
			t.Errorf("%s: DispatcherSpec has no property %s", openAPIFile, key)
		}
	}
	if spec.Value.Properties["paused"] == nil {
		t.Errorf("%s: DispatcherSpec has no property paused", openAPIFile)
	}

	b, err := os.ReadFile("../configs/mmmq.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The entry is the comment block after "# dispatchers:", indented by
	// two spaces per level under "- ".
	_, block, ok := strings.Cut(string(b), "# dispatchers:")
	if !ok {
		t.Fatal("configs/mmmq.yaml: no commented mmmq.broker.dispatchers entry")
	}
	var path []string // the keys open at each depth
	documented := map[string]bool{}
	base := -1
	for _, l := range strings.Split(block, "\n")[1:] {
		rest, ok := strings.CutPrefix(l, "    #")
		if !ok {
			break
		}
		rest = strings.Replace(rest, "- ", "  ", 1)
		trimmed := strings.TrimLeft(rest, " ")
		name, _, ok := strings.Cut(trimmed, ":")
		if !ok || name == "" || strings.ContainsAny(name, " #\"") {
			continue
		}
		indent := len(rest) - len(trimmed)
		if base < 0 {
			base = indent
		}
		depth := (indent - base) / 2
		path = append(path[:min(depth, len(path))], name)
		documented[strings.Join(path, ".")] = true
	}
	for _, key := range dispatcher.SettingsKeys() {
		if !documented[key] {
			t.Errorf("configs/mmmq.yaml: the commented dispatchers entry does not document %s (found %v)", key, documented)
		}
	}
}
