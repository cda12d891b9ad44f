package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/webhooks"
)

// Spec is a dispatcher as the admin API and dispatchers.json write it: the
// fields of a mmmq.broker.dispatchers entry under the same (kebab-case)
// names, durations as strings ("30s"), plus whether it is paused.
//
//	{"name":"orders","host":"http://localhost:8081","patterns":["order.**"],
//	 "path":"/mmmq/messages","timeout":"30s",
//	 "commit":{"policy":"every-message","interval":"1s","max-count":1000},
//	 "start":"earliest","dead-letter":"dead-letter.orders","ack-mode":"body",
//	 "max-abnormal-attempts":0,"max-abnormal-duration":"0s","backoff-jitter":false,
//	 "signing-secrets":["whsec_<base64 key>"],"headers":{"Authorization":"Bearer x"},
//	 "cloudevents":false,"max-in-flight":1,
//	 "batch":{"max-messages":100,"max-bytes":1048576,"max-wait":"50ms"},"paused":false}
//
// Secrets never leave the broker through the API: what GET shows (specOf)
// has every signing secret in its redacted form, webhooks.Secret's String
// "whsec_\u2026(redacted, fingerprint f74e1720)" (\u2026 is one ellipsis
// character), and every header value replaced by RedactedValue,
// "(redacted)", the header names kept. dispatchers.json (storedSpecOf,
// mode 0600) keeps the real secrets and values.
//
// So that GET, edit, PUT works, a replace (PUT) whose signing-secrets entry
// is exactly the redacted form of one of the dispatcher's current secrets
// keeps that secret, and a header whose value is exactly "(redacted)" keeps
// that header's current value (see resolveRedacted). Anything else is taken
// as given: a new secret ("whsec_" + base64) or a new value. A redacted form
// that matches nothing current (and any redacted form in a create) is 400
// naming the field. A header cannot be set to the literal value
// "(redacted)".
type Spec struct {
	Name     string      `json:"name"`
	Host     string      `json:"host"`
	Patterns []string    `json:"patterns"`
	Path     string      `json:"path,omitempty"`
	Timeout  Duration    `json:"timeout,omitempty"`
	Commit   *CommitSpec `json:"commit,omitempty"`
	// Start is "earliest" (default: replay every stored message) or
	// "latest" (skip what the topics hold when the dispatcher is created).
	Start string `json:"start,omitempty"`
	// DeadLetter is the dead-letter topic: absent (nil) means
	// "dead-letter.<name>", "" turns dead letters off (log and skip). GET
	// shows the effective topic, "" when off.
	DeadLetter *string `json:"dead-letter,omitempty"`
	// AckMode is "body" (default) or "status". GET shows the effective one.
	AckMode string `json:"ack-mode,omitempty"`
	// MaxAbnormalAttempts dead-letters a message after this many abnormal
	// answers (0: no limit).
	MaxAbnormalAttempts int `json:"max-abnormal-attempts,omitempty"`
	// MaxAbnormalDuration dead-letters a message still answered abnormally
	// this long after its first abnormal answer (0: no limit).
	MaxAbnormalDuration Duration `json:"max-abnormal-duration,omitempty"`
	// BackoffJitter draws each backoff wait from (0, delay].
	BackoffJitter bool `json:"backoff-jitter,omitempty"`
	// SigningSecrets sign every push (Standard Webhooks), "whsec_<base64>"
	// each; redacted in GET (see above).
	SigningSecrets []string `json:"signing-secrets,omitempty"`
	// Headers are added to every push; values redacted in GET.
	Headers map[string]string `json:"headers,omitempty"`
	// CloudEvents renders pushes as CloudEvents 1.0 in binary mode.
	CloudEvents bool `json:"cloudevents,omitempty"`
	// MaxInFlight is the most pushes of one topic outstanding at once,
	// 1..1024 (0: 1). GET shows the effective value.
	MaxInFlight int `json:"max-in-flight,omitempty"`
	// Batch groups messages into one push; absent or max-messages 0: off.
	// GET shows it only when on.
	Batch *BatchSpec `json:"batch,omitempty"`
	// TLS is how HTTPS connections to the consumer are made (private CA,
	// client certificate, server name); only with an https host. The
	// files are read when the dispatcher is created or replaced. GET shows
	// it only when set (paths, no file contents).
	TLS    *TLSSpec `json:"tls,omitempty"`
	Paused bool     `json:"paused,omitempty"`
}

// TLSSpec is a dispatcher's tls entry: the keys of
// mmmq.broker.dispatchers[i].tls under the same names.
type TLSSpec struct {
	CAFile             string `json:"ca-file,omitempty"`
	CertFile           string `json:"cert-file,omitempty"`
	KeyFile            string `json:"key-file,omitempty"`
	ServerName         string `json:"server-name,omitempty"`
	InsecureSkipVerify bool   `json:"insecure-skip-verify,omitempty"`
}

// CommitSpec is a dispatcher's commit policy (the "commit" entry).
type CommitSpec struct {
	Policy   string   `json:"policy,omitempty"` // "every-message" (default) or "interval"
	Interval Duration `json:"interval,omitempty"`
	MaxCount int      `json:"max-count,omitempty"`
}

// BatchSpec is a dispatcher's batch setting (the "batch" entry): up to
// max-messages (1..10000; 0 off) messages of at most max-bytes (bytes; 0:
// 1 MiB) in all per push, waiting up to max-wait for a batch to fill.
type BatchSpec struct {
	MaxMessages int      `json:"max-messages,omitempty"`
	MaxBytes    int64    `json:"max-bytes,omitempty"`
	MaxWait     Duration `json:"max-wait,omitempty"`
}

// RedactedValue replaces every header value in what the API shows.
const RedactedValue = "(redacted)"

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
//
// The members only answers carry (source, deadLetterTopic, topics) are
// accepted and ignored, so that what GET showed can be sent back as is.
func decodeSpec(body []byte) (Spec, error) {
	var in struct {
		Spec
		Source          json.RawMessage `json:"source"`
		DeadLetterTopic json.RawMessage `json:"deadLetterTopic"`
		Topics          json.RawMessage `json:"topics"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		if f := badDuration(body); f != "" {
			return Spec{}, contract.BadRequest("invalid dispatcher: field %q %s", f, err.Error())
		}
		return Spec{}, contract.BadRequest("invalid dispatcher: %s", jsonProblem(err))
	}
	if dec.More() {
		return Spec{}, contract.BadRequest("invalid dispatcher: data after the JSON object")
	}
	return in.Spec, nil
}

// badDuration names the first duration field of body that is not a valid
// duration ("timeout", "commit.interval", ...), "" when none is (the
// decoder's errors from Duration.UnmarshalJSON do not say which field).
func badDuration(body []byte) string {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return ""
	}
	bad := func(raw json.RawMessage) bool {
		var d Duration
		return raw != nil && d.UnmarshalJSON(raw) != nil
	}
	for _, f := range []string{"timeout", "max-abnormal-duration"} {
		if bad(top[f]) {
			return f
		}
	}
	for sec, f := range map[string]string{"commit": "interval", "batch": "max-wait"} {
		var sub map[string]json.RawMessage
		if json.Unmarshal(top[sec], &sub) == nil && bad(sub[f]) {
			return sec + "." + f
		}
	}
	return ""
}

// jsonProblem turns a decoding error into a sentence naming the field.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "the body is empty: send a JSON object"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	case asTypeError(err, &te) && strings.HasPrefix(te.Field, "Spec.headers"):
		return `field "headers" must be a JSON object of strings`
	case asTypeError(err, &te):
		// The body decodes into a struct embedding Spec: its fields are
		// named "Spec.<name>" by the decoder.
		return fmt.Sprintf("field %q must be a JSON %s", strings.TrimPrefix(te.Field, "Spec."), jsonKind(te.Type.Kind().String()))
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
	case "struct", "ptr", "map":
		return "object"
	case "bool":
		return "boolean"
	}
	return "number"
}

// config returns the mmmq.broker.dispatchers entry of s, with the
// per-dispatcher defaults filled as config.Normalize fills them.
func (s Spec) config(defaults config.DispatchConfig) config.DispatcherConfig {
	dc := config.DispatcherConfig{Name: s.Name, Host: s.Host, Patterns: s.Patterns, Path: s.Path, Timeout: time.Duration(s.Timeout), Start: s.Start,
		DeadLetter: s.DeadLetter, AckMode: s.AckMode, MaxAbnormalAttempts: s.MaxAbnormalAttempts,
		MaxAbnormalDuration: time.Duration(s.MaxAbnormalDuration), BackoffJitter: s.BackoffJitter,
		SigningSecrets: s.SigningSecrets, Headers: s.Headers, CloudEvents: s.CloudEvents, MaxInFlight: s.MaxInFlight}
	if s.Commit != nil {
		dc.Commit = config.CommitConfig{Policy: config.CommitPolicy(s.Commit.Policy), Interval: time.Duration(s.Commit.Interval), MaxCount: s.Commit.MaxCount}
	}
	if s.Batch != nil {
		dc.Batch = config.BatchConfig{MaxMessages: s.Batch.MaxMessages, MaxBytes: s.Batch.MaxBytes, MaxWait: time.Duration(s.Batch.MaxWait)}
	}
	if s.TLS != nil {
		dc.TLS = config.DispatcherTLSConfig(*s.TLS)
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

// specOf describes d as the API shows it: signing secrets in their
// redacted form and header values replaced by RedactedValue (see Spec).
func specOf(d *dispatcher.Dispatcher, paused bool) Spec {
	s := fullSpecOf(d, paused)
	for _, sec := range d.SigningSecrets() {
		s.SigningSecrets = append(s.SigningSecrets, sec.String())
	}
	for name := range s.Headers {
		s.Headers[name] = RedactedValue
	}
	return s
}

// storedSpecOf describes d as dispatchers.json keeps it: the real header
// values and secrets, the serialized secrets d was built from (a Secret
// never gives its key back).
func storedSpecOf(d *dispatcher.Dispatcher, paused bool, secrets []string) Spec {
	s := fullSpecOf(d, paused)
	s.SigningSecrets = slices.Clone(secrets)
	return s
}

// fullSpecOf describes d with its real header values and no signing
// secrets (specOf and storedSpecOf add them).
func fullSpecOf(d *dispatcher.Dispatcher, paused bool) Spec {
	s := Spec{Name: d.Name(), Host: d.Host().String(), Path: d.Path(), Timeout: Duration(d.Timeout()), Start: d.Start(), Paused: paused}
	for _, p := range d.Patterns() {
		s.Patterns = append(s.Patterns, p.String())
	}
	pol := d.CommitPolicy()
	s.Commit = &CommitSpec{Policy: string(pol.Mode), Interval: Duration(pol.Interval), MaxCount: pol.MaxCount}
	if s.Commit.Policy == "" {
		s.Commit.Policy = string(config.CommitEveryMessage)
	}
	dl := d.DeadLetter()
	lim := d.AbnormalLimit()
	s.DeadLetter, s.AckMode = &dl, string(d.AckMode())
	s.MaxAbnormalAttempts, s.MaxAbnormalDuration = lim.MaxAttempts, Duration(lim.MaxDuration)
	s.BackoffJitter, s.CloudEvents, s.MaxInFlight = d.BackoffJitter(), d.CloudEvents(), d.MaxInFlight()
	if h := d.Headers(); len(h) > 0 {
		s.Headers = h
	}
	if b := d.Batch(); b.MaxMessages > 0 {
		s.Batch = &BatchSpec{MaxMessages: b.MaxMessages, MaxBytes: b.MaxBytes, MaxWait: Duration(b.MaxWait)}
	}
	if t := d.TLS(); !t.IsZero() {
		s.TLS = &TLSSpec{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	}
	return s
}

// resolveRedacted replaces, in s, the redacted forms specOf shows by the
// values they stand for: a signing-secrets entry equal to the redacted form
// of one of cur's secrets by that secret (secrets are the serialized ones
// cur was built from, in order), a header value equal to RedactedValue by
// the value of cur's header of that name (compared without regard to
// case). cur is nil for a create. A redacted form that stands for nothing
// is a 400 naming the field. s's slices and maps are copied, not changed.
func resolveRedacted(s *Spec, cur *dispatcher.Dispatcher, secrets []string) error {
	var curSecrets []webhooks.Secret
	var curHeaders map[string]string
	if cur != nil {
		curSecrets, curHeaders = cur.SigningSecrets(), cur.Headers()
	}
	if len(s.SigningSecrets) > 0 {
		out := slices.Clone(s.SigningSecrets)
		for i, v := range out {
			if !strings.HasPrefix(v, webhooks.SecretPrefix+redactedSecretMark) {
				continue
			}
			j := slices.IndexFunc(curSecrets, func(sec webhooks.Secret) bool { return sec.String() == v })
			if j < 0 || j >= len(secrets) {
				return contract.BadRequest("invalid dispatcher: signing-secrets[%d]: %q is the redacted form of a secret this dispatcher does not have; send the secret itself (whsec_ and its base64 key)", i, v)
			}
			out[i] = secrets[j]
		}
		s.SigningSecrets = out
	}
	if len(s.Headers) > 0 {
		out := maps.Clone(s.Headers)
		for _, name := range slices.Sorted(maps.Keys(out)) {
			if out[name] != RedactedValue {
				continue
			}
			v, ok := headerValue(curHeaders, name)
			if !ok {
				return contract.BadRequest("invalid dispatcher: headers: the value of %q is %q, but the dispatcher has no such header to keep; send the value itself", name, RedactedValue)
			}
			out[name] = v
		}
		s.Headers = out
	}
	return nil
}

// redactedSecretMark follows webhooks.SecretPrefix in a redacted secret:
// the ellipsis and the parenthesis of webhooks.Secret's String (a real
// secret is base64, which has neither).
const redactedSecretMark = "\u2026("

// headerValue returns h's value of name, compared without regard to case
// (an exact match first).
func headerValue(h map[string]string, name string) (string, bool) {
	if v, ok := h[name]; ok {
		return v, true
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}
