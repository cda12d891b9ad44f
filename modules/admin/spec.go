package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// Spec is a dispatcher as the admin API and dispatchers.json write it: the
// fields of a mmmq.broker.dispatchers entry under the same (kebab-case)
// names, durations as strings ("30s"), plus whether it is paused.
//
//	{"name":"orders","host":"http://localhost:8081","patterns":["order.**"],
//	 "path":"/mmmq/messages","timeout":"30s",
//	 "commit":{"policy":"every-message","interval":"1s","max-count":1000},"paused":false}
type Spec struct {
	Name     string      `json:"name"`
	Host     string      `json:"host"`
	Patterns []string    `json:"patterns"`
	Path     string      `json:"path,omitempty"`
	Timeout  Duration    `json:"timeout,omitempty"`
	Commit   *CommitSpec `json:"commit,omitempty"`
	// Start is "earliest" (default: replay every stored message) or
	// "latest" (skip what the topics hold when the dispatcher is created).
	Start  string `json:"start,omitempty"`
	Paused bool   `json:"paused,omitempty"`
}

// CommitSpec is a dispatcher's commit policy (the "commit" entry).
type CommitSpec struct {
	Policy   string   `json:"policy,omitempty"` // "every-message" (default) or "interval"
	Interval Duration `json:"interval,omitempty"`
	MaxCount int      `json:"max-count,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("1m30s").
type Duration time.Duration

// MarshalJSON writes d as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string such as "30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf(`must be a duration string such as "30s"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf(`must be a duration >= 0 such as "30s"; got %q`, s)
	}
	*d = Duration(v)
	return nil
}

// decodeSpec reads one Spec from body: unknown fields, a second value and
// bad types are refused, naming the field.
func decodeSpec(body []byte) (Spec, error) {
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Spec{}, contract.BadRequest("invalid dispatcher: %s", jsonProblem(err))
	}
	if dec.More() {
		return Spec{}, contract.BadRequest("invalid dispatcher: data after the JSON object")
	}
	return s, nil
}

// jsonProblem turns a decoding error into a sentence naming the field.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "the body is empty: send a JSON object"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	case asTypeError(err, &te):
		return fmt.Sprintf("field %q must be a JSON %s", te.Field, jsonKind(te.Type.Kind().String()))
	}
	return err.Error()
}

func asTypeError(err error, te **json.UnmarshalTypeError) bool {
	t, ok := err.(*json.UnmarshalTypeError)
	if ok {
		*te = t
	}
	return ok
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "slice":
		return "array"
	case "struct", "ptr":
		return "object"
	case "bool":
		return "boolean"
	}
	return "number"
}

// config returns the mmmq.broker.dispatchers entry of s, with the
// per-dispatcher defaults filled as config.Normalize fills them.
func (s Spec) config(defaults config.DispatchConfig) config.DispatcherConfig {
	dc := config.DispatcherConfig{Name: s.Name, Host: s.Host, Patterns: s.Patterns, Path: s.Path, Timeout: time.Duration(s.Timeout), Start: s.Start}
	if s.Commit != nil {
		dc.Commit = config.CommitConfig{Policy: config.CommitPolicy(s.Commit.Policy), Interval: time.Duration(s.Commit.Interval), MaxCount: s.Commit.MaxCount}
	}
	cfg := config.Config{MMMQ: config.MMMQConfig{Broker: config.BrokerConfig{Dispatch: defaults, Dispatchers: config.DispatchersConfig{dc}}}}
	cfg.Normalize()
	return cfg.MMMQ.Broker.Dispatchers[0]
}

// build validates s and returns its Dispatcher, labelled as created
// through the API. Errors are 400s naming the field ("patterns[1]: ...").
func (s Spec) build(defaults config.DispatchConfig) (*dispatcher.Dispatcher, error) {
	if s.Name == "" {
		return nil, contract.BadRequest(`invalid dispatcher: field "name" is required`)
	}
	if len(s.Patterns) == 0 {
		return nil, contract.BadRequest(`invalid dispatcher: field "patterns" needs at least one topic pattern`)
	}
	d, err := dispatcher.FromConfig(s.config(defaults), "dispatcher "+s.Name, dispatcher.SourceAPI)
	if err != nil {
		return nil, contract.BadRequest("invalid dispatcher: %v", err)
	}
	return d, nil
}

// specOf describes d as the API shows it (secrets would be left out: the
// dispatchers have none yet).
func specOf(d *dispatcher.Dispatcher, paused bool) Spec {
	s := Spec{Name: d.Name(), Host: d.Host().String(), Path: d.Path(), Timeout: Duration(d.Timeout()), Start: d.Start(), Paused: paused}
	for _, p := range d.Patterns() {
		s.Patterns = append(s.Patterns, p.String())
	}
	pol := d.CommitPolicy()
	s.Commit = &CommitSpec{Policy: string(pol.Mode), Interval: Duration(pol.Interval), MaxCount: pol.MaxCount}
	if s.Commit.Policy == "" {
		s.Commit.Policy = string(config.CommitEveryMessage)
	}
	return s
}
