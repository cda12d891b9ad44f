package contract

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

type caseInner struct {
	MaxCount int           `json:"max-count"`
	Every    time.Duration `json:"every,omitempty"`
}

type caseCustom struct{ X int }

func (c *caseCustom) UnmarshalJSON([]byte) error { return nil }

type caseBase struct {
	RateLimit float64 `json:"rate-limit"`
}

type caseBody struct {
	caseBase
	Name    string               `json:"name"`
	Commit  caseInner            `json:"commit"`
	Ptr     *caseInner           `json:"ptr"`
	List    []caseInner          `json:"list"`
	ByName  map[string]caseInner `json:"by-name"`
	Headers map[string]string    `json:"headers"`
	Custom  caseCustom           `json:"custom"`
	Raw     json.RawMessage      `json:"raw"`
	Any     any                  `json:"any"`
	Untag   int
	Skip    int `json:"-"`
	hidden  int
}

// FindMemberCase: a name that matches a member only without regard to
// case is found at every level a struct decodes, as sent and as spelt;
// exact names, unknown names, map keys and what a type reads itself are
// not.
func TestFindMemberCase(t *testing.T) {
	_ = caseBody{}.hidden
	typ := reflect.TypeFor[caseBody]()
	for body, want := range map[string]MemberCase{
		`{"Name":"x"}`:                                          {Sent: "Name", Want: "name"},
		`{"Rate-Limit":5}`:                                      {Sent: "Rate-Limit", Want: "rate-limit"},
		`{"name":"x","commit":{"Max-Count":1}}`:                 {Sent: "commit.Max-Count", Want: "commit.max-count"},
		`{"ptr":{"MAX-COUNT":1}}`:                               {Sent: "ptr.MAX-COUNT", Want: "ptr.max-count"},
		`{"list":[{"max-count":1},{"Every":1}]}`:                {Sent: "list[1].Every", Want: "list[1].every"},
		`{"by-name":{"Any-Key":{"Max-count":1}}}`:               {Sent: "by-name.Any-Key.Max-count", Want: "by-name.Any-Key.max-count"},
		`{"untag":1}`:                                           {Sent: "untag", Want: "Untag"},
		`{"Commit":{"Max-Count":1}}`:                            {Sent: "Commit", Want: "commit"},
		`{"name":"x","NAME":"y"}`:                               {Sent: "NAME", Want: "name"},
		"{\"\u017fkip\":1, \"rate-limit\":1, \"Rate-limit\":2}": {Sent: "Rate-limit", Want: "rate-limit"},
	} {
		got, ok := FindMemberCase([]byte(body), typ)
		if !ok || got != want {
			t.Errorf("%s: %+v %v, want %+v", body, got, ok, want)
		}
	}
	for _, body := range []string{
		`{"name":"x","rate-limit":1,"commit":{"max-count":1},"list":[{"every":1}],"Untag":1}`,
		`{"colour":1,"Skip":1,"skip":1,"hidden":1,"caseBase":{}}`,
		`{"headers":{"X-Any":"a","x-any":"b"}}`,
		`{"custom":{"X":1,"x":2},"raw":{"Name":1},"any":{"Name":1}}`,
		`{"commit":"not an object","list":{"Every":1},"ptr":null}`,
		`not json`, ``, `[{"Name":1}]`, `{"name":`, `{"Name"`,
	} {
		if got, ok := FindMemberCase([]byte(body), typ); ok {
			t.Errorf("%s: found %+v, want nothing", body, got)
		}
	}
}
