package dispatcher

import (
	"strings"
	"testing"
)

func TestSetOfDuplicateSources(t *testing.T) {
	h := Host{HTTP, "localhost", 8081}
	_, err := SetOf(
		New("dup", h, MustPattern("a")).WithSource("Go provider example.com/orders.New"),
		New("dup", h, MustPattern("b")).WithSource("config mmmq.broker.dispatchers[0]"),
		New("dup", h, MustPattern("c")),
	)
	want := `duplicate dispatcher name "dup" (provided 3 times: Go provider example.com/orders.New; config mmmq.broker.dispatchers[0]; unlabelled (no WithSource))`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("SetOf = %v\nwant it to contain %s", err, want)
	}
	d := New("x", h, MustPattern("a"))
	if d.Source() != "" || d.WithSource("s").Source() != "s" || d.Source() != "" {
		t.Error("WithSource must label a copy and leave d alone")
	}
}
