package configdispatchers

import (
	"testing"

	"github.com/mmmq/mmmq/modules/config"
)

func TestBuildLabelsTheSource(t *testing.T) {
	ds, err := Build(config.DispatchersConfig{
		{Name: "a", Host: "http://localhost:8081", Patterns: []string{"x.*"}},
		{Name: "b", Host: "http://localhost:8082", Patterns: []string{"y.**"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"config mmmq.broker.dispatchers[0]", "config mmmq.broker.dispatchers[1]"} {
		if got := ds[i].Source(); got != want {
			t.Errorf("dispatcher %d: Source() = %q, want %q", i, got, want)
		}
	}
}
