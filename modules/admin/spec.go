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

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/webhooks"
)

// Spec is a dispatcher as the admin API and dispatchers.json write it:
// dispatcher.Settings (the keys of a mmmq.broker.dispatchers entry under
// the same kebab-case names, durations as strings such as "30s") plus
// whether it is paused. GET shows the effective values (the default path,
// timeout, commit policy, dead-letter topic, ack mode and max-in-flight
// written out; batch only when on, tls only when set, file paths only).
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
	dispatcher.Settings
	// Paused says whether delivery is paused (POST .../pause, .../resume).
	Paused bool `json:"paused,omitempty"`
}

// RedactedValue replaces every header value in what the API shows.
const RedactedValue = "(redacted)"

// decodeSpec reads one Spec from body: unknown fields, a second value and
// bad types are refused, naming the field.
//
// The members only answers carry (source, deadLetterTopic, rateLimit,
// breaker, pauseReason, pausedAt, topics) are
// accepted and ignored, so that what GET showed can be sent back as is.
func decodeSpec(body []byte) (Spec, error) {
	var in struct {
		Spec
		Source          json.RawMessage `json:"source"`
		DeadLetterTopic json.RawMessage `json:"deadLetterTopic"`
		RateLimit       json.RawMessage `json:"rateLimit"`
		Breaker         json.RawMessage `json:"breaker"`
		PauseReason     json.RawMessage `json:"pauseReason"`
		PausedAt        json.RawMessage `json:"pausedAt"`
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
		var d dispatcher.Duration
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
	case asTypeError(err, &te) && strings.HasPrefix(specField(te.Field), "headers"):
		return `field "headers" must be a JSON object of strings`
	case asTypeError(err, &te):
		return fmt.Sprintf("field %q must be a JSON %s", specField(te.Field), jsonKind(te.Type.Kind().String()))
	}
	return err.Error()
}

// specField is the body's field name in a decoder's field path: the body
// decodes into a struct embedding Spec, which embeds dispatcher.Settings,
// and the decoder prefixes the embedded structs' Go names.
func specField(path string) string {
	for _, p := range []string{"Spec.", "Settings."} {
		path = strings.TrimPrefix(path, p)
	}
	return path
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

// build validates s and returns its Dispatcher, labelled as created
// through the API. Errors are 400s naming the field ("patterns[1]: ...").
func (s Spec) build(defaults dispatcher.Config) (*dispatcher.Dispatcher, error) {
	if err := s.Validate(specKey); err != nil {
		return nil, contract.BadRequest("invalid dispatcher: %s", fieldProblems(err))
	}
	d, err := dispatcher.FromSettings(s.WithDefaults(defaults), "dispatcher "+s.Name, dispatcher.SourceAPI)
	if err != nil {
		return nil, contract.BadRequest("invalid dispatcher: %v", err)
	}
	return d, nil
}

// specKey is the entry key given to dispatcher.Settings.Validate; the
// API's errors name the field without it.
const specKey = "dispatcher"

// fieldProblems writes the problems Validate found as "<field>: <problem>"
// ("patterns[0]: invalid topic pattern ..."), "; " between them: the same
// rules as a YAML entry's, named by the body's field.
func fieldProblems(err error) string {
	var out []string
	for _, e := range config.Problems(err) {
		var ke *config.KeyError
		if errors.As(e, &ke) {
			out = append(out, strings.TrimPrefix(ke.Key, specKey+".")+": "+ke.Problem)
			continue
		}
		out = append(out, e.Error())
	}
	return strings.Join(out, "; ")
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
	return Spec{Settings: d.Settings(), Paused: paused}
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
