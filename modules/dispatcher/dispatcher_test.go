package dispatcher

import (
	"strings"
	"testing"
	"time"
)

func TestParseHost(t *testing.T) {
	good := map[string]Host{
		"http://localhost:8081":   {HTTP, "localhost", 8081},
		"HTTPS://example.com:443": {HTTPS, "example.com", 443},
		"http://127.0.0.1:1/":     {HTTP, "127.0.0.1", 1},
		"http://[::1]:8080":       {HTTP, "::1", 8080},
	}
	for in, want := range good {
		h, err := ParseHost(in)
		if err != nil || h != want {
			t.Errorf("ParseHost(%q) = %+v, %v; want %+v", in, h, err, want)
		}
	}
	if got := (Host{HTTP, "::1", 8080}).String(); got != "http://[::1]:8080" {
		t.Errorf("String() = %q", got)
	}
	if got := (Host{HTTP, "localhost", 8081}).URL().String(); got != "http://localhost:8081" {
		t.Errorf("URL() = %q", got)
	}
	bad := map[string]string{
		"localhost:8081":             "scheme",
		"ftp://localhost:21":         "protocol",
		"http://localhost":           "missing port",
		"http://localhost:0":         "port 0",
		"http://localhost:70000":     "port 70000",
		"http://localhost:8081/path": "path",
		"http://u:p@localhost:8081":  "user info",
		"http://localhost:8081?x=1":  "query",
		"http://localhost:8081#f":    "fragment",
		"http://:8081":               "empty address",
		"":                           "scheme",
	}
	for in, want := range bad {
		_, err := ParseHost(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseHost(%q) = %v, want an error mentioning %q", in, err, want)
		}
	}
}

func TestDispatcher(t *testing.T) {
	h := Host{HTTP, "localhost", 8081}
	d := New("order-dispatcher", h, MustPattern("order.**"), MustPattern("payment.*"))
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if d.Path() != "" || d.Timeout() != 0 || d.CommitPolicy().Mode != EveryMessage {
		t.Errorf("defaults: path %q timeout %s policy %+v", d.Path(), d.Timeout(), d.CommitPolicy())
	}
	d2 := d.WithPath("/in").WithTimeout(time.Second).WithCommitPolicy(CommitPolicy{Mode: Interval, MaxCount: 5})
	if d.Path() != "" || d2.Path() != "/in" || d2.Timeout() != time.Second || d2.CommitPolicy().MaxCount != 5 {
		t.Errorf("With* must copy: d=%v d2=%v", d, d2)
	}
	for topic, want := range map[string]bool{"order": true, "order.a.b": true, "payment.x": true, "payment": false, "x": false} {
		if d.Matches(topic) != want {
			t.Errorf("Matches(%q) = %v", topic, !want)
		}
	}
	if got := d.String(); got != "order-dispatcher -> http://localhost:8081 [order.** payment.*]" {
		t.Errorf("String() = %q", got)
	}
	ps := d.Patterns()
	ps[0] = Pattern{}
	if !d.Matches("order.x") {
		t.Error("Patterns() exposed the internal slice")
	}

	bad := []struct {
		d    *Dispatcher
		want string
	}{
		{New("", h, MustPattern("a")), "name"},
		{New(".x", h, MustPattern("a")), "name"},
		{New("a/b", h, MustPattern("a")), "name"},
		{New("d", h), "no topic patterns"},
		{New("d", h, Pattern{}), "zero Pattern"},
		{New("d", Host{"ftp", "x", 1}, MustPattern("a")), "protocol"},
		{New("d", Host{HTTP, "", 1}, MustPattern("a")), "empty address"},
		{New("d", Host{HTTP, "x", 0}, MustPattern("a")), "port"},
		{New("d", h, MustPattern("a")).WithPath("in"), "path"},
		{New("d", h, MustPattern("a")).WithTimeout(-1), "negative timeout"},
		{New("d", h, MustPattern("a")).WithCommitPolicy(CommitPolicy{Mode: Interval}), "interval mode needs"},
		{New("d", h, MustPattern("a")).WithCommitPolicy(CommitPolicy{Mode: "sometimes"}), "unknown mode"},
	}
	for _, tt := range bad {
		err := tt.d.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "dispatcher") {
			t.Errorf("Validate(%v) = %v, want an error mentioning %q", tt.d, err, tt.want)
		}
	}
}

func TestSet(t *testing.T) {
	h := Host{HTTP, "localhost", 8081}
	s, err := SetOf(New("c", h, MustPattern("x.*")), nil, New("a", h, MustPattern("**")), New("b", h, MustPattern("y")))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range s.All() {
		names = append(names, d.Name())
	}
	if strings.Join(names, ",") != "a,b,c" || s.Len() != 3 {
		t.Errorf("names = %v, want sorted a,b,c", names)
	}
	if d, ok := s.Get("b"); !ok || d.Name() != "b" {
		t.Error("Get(b)")
	}
	if _, ok := s.Get("zz"); ok {
		t.Error("Get(zz)")
	}
	var matching []string
	for _, d := range s.Matching("x.1") {
		matching = append(matching, d.Name())
	}
	if strings.Join(matching, ",") != "a,c" {
		t.Errorf("Matching = %v", matching)
	}

	_, err = SetOf(New("dup", h, MustPattern("a")), New("ok", h, MustPattern("a")), New("dup", h, MustPattern("b")), New("bad name!", h, MustPattern("a")))
	if err == nil || !strings.Contains(err.Error(), `duplicate dispatcher name "dup" (provided 2 times)`) || !strings.Contains(err.Error(), `"bad name!"`) {
		t.Errorf("SetOf = %v, want duplicate dup and invalid 'bad name!'", err)
	}
}
