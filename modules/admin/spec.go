package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
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
//	 "signing-secrets":["whsec_<base64 key>"],"signing-keys":["whsk_<base64 seed>"],
//	 "headers":{"Authorization":"Bearer x"},
//	 "cloudevents":false,"max-in-flight":1,
//	 "batch":{"max-messages":100,"max-bytes":1048576,"max-wait":"50ms"},"paused":false}
//
// Secrets never leave the broker through the API: what GET shows (specOf)
// has every signing secret in its redacted form, webhooks.Secret's String
// "whsec_\u2026(redacted, fingerprint f74e1720)" (\u2026 is one ellipsis
// character), every signing key in webhooks.SigningKey's
// "whsk_\u2026(redacted, kid 0123456789abcdef)", and every header value
// replaced by RedactedValue, "(redacted)", the header names kept.
// dispatchers.json (storedSpecOf, mode 0600) keeps the real secrets, keys
// and values.
//
// So that GET, edit, PUT works, a replace (PUT) whose signing-secrets or
// signing-keys entry is exactly the redacted form of one of the
// dispatcher's current ones keeps it, and a header whose value is exactly "(redacted)" keeps
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

// specBody is what a create or replace body decodes into: a Spec, and
// the members only answers carry (source, deadLetterTopic, rateLimit,
// breaker, concurrency, pauseReason, pausedAt, topics; Listed and Status),
// accepted and ignored so that what GET showed can be sent back as is.
type specBody struct {
	Spec
	Source          json.RawMessage `json:"source"`
	DeadLetterTopic json.RawMessage `json:"deadLetterTopic"`
	RateLimit       json.RawMessage `json:"rateLimit"`
	Breaker         json.RawMessage `json:"breaker"`
	Concurrency     json.RawMessage `json:"concurrency"`
	PauseReason     json.RawMessage `json:"pauseReason"`
	PausedAt        json.RawMessage `json:"pausedAt"`
	Topics          json.RawMessage `json:"topics"`
}

// readOnlyMembers are the JSON names of specBody's read-only members.
var readOnlyMembers = func() []string {
	var out []string
	for f := range reflect.TypeFor[specBody]().Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" {
			out = append(out, name)
		}
	}
	return out
}()

// readOnlyTwins maps each read-only member whose name is the camelCase
// form of a setting ("rateLimit", "rate-limit") to that setting. GET
// shows such a member only when it shows the setting too (rateLimit when
// rate-limit is above 0), so one sent without its setting is not what GET
// showed: it is someone taking it for the setting, and a 400 says so.
var readOnlyTwins = func() map[string]string {
	out := map[string]string{}
	for _, ro := range readOnlyMembers {
		for _, k := range dispatcher.SettingsKeys() {
			if !strings.Contains(k, ".") && camelCase(k) == ro {
				out[ro] = k
			}
		}
	}
	return out
}()

// camelCase is the camelCase form of a kebab-case name ("rate-limit":
// "rateLimit").
func camelCase(kebab string) string {
	parts := strings.Split(kebab, "-")
	for i := 1; i < len(parts); i++ {
		if p := parts[i]; p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "")
}

// decodeSpec reads one Spec from body: unknown fields, a second value and
// bad types are refused, naming the field. Member names are matched
// exactly, at every level (encoding/json alone would take "Rate-Limit"
// for "rate-limit"): a name that differs from a member's only in case is
// refused naming both.
//
// The read-only members of specBody are accepted and ignored, so that
// what GET showed can be sent back as is; but one named after a setting
// (readOnlyTwins: "rateLimit") sent without that setting is refused,
// naming the setting.
func decodeSpec(body []byte) (Spec, error) {
	if p, ok := contract.FindRepeatedMember(body); ok {
		return Spec{}, contract.BadRequest("invalid dispatcher: field %q is given more than once", p)
	}
	if mc, ok := contract.FindMemberCase(body, reflect.TypeFor[specBody]()); ok {
		return Spec{}, contract.BadRequest("invalid dispatcher: unknown field %q (%s)", mc.Sent, specMemberIs(mc.Want))
	}
	var in specBody
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
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return Spec{}, contract.BadRequest("invalid dispatcher: %s", jsonProblem(err))
	}
	for _, ro := range readOnlyMembers {
		setting, twin := readOnlyTwins[ro]
		if _, sent := top[ro]; !twin || !sent {
			continue
		}
		if _, sent := top[setting]; !sent {
			return Spec{}, contract.BadRequest("invalid dispatcher: %q is read-only (shown by GET); the setting is %q: send %q, or leave %q out",
				ro, setting, setting, ro)
		}
	}
	return in.Spec, nil
}

// specMemberIs says what the member spelt want is, for an error about a
// name sent in another case: `the setting is "rate-limit"`, or for a
// read-only member `"rateLimit" is read-only (shown by GET); the setting
// is "rate-limit"`.
func specMemberIs(want string) string {
	if !slices.Contains(readOnlyMembers, want) {
		return fmt.Sprintf("the setting is %q", want)
	}
	out := fmt.Sprintf("%q is read-only (shown by GET)", want)
	if setting, ok := readOnlyTwins[want]; ok {
		out += fmt.Sprintf("; the setting is %q", setting)
	}
	return out
}

// badDuration names the first duration field of body that is not a valid
// duration ("timeout", "pause-after", "commit.interval", ...), "" when
// none is (the decoder's errors from Duration.UnmarshalJSON do not say
// which field). The fields are every dispatcher.Duration of
// dispatcher.Settings, found by their JSON names, so a setting added
// later is named too.
func badDuration(body []byte) string {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return ""
	}
	for _, path := range durationFields {
		obj, raw := top, json.RawMessage(nil)
		for i, seg := range path {
			if i == len(path)-1 {
				raw = obj[seg]
				break
			}
			var sub map[string]json.RawMessage
			if json.Unmarshal(obj[seg], &sub) != nil {
				break
			}
			obj = sub
		}
		var d dispatcher.Duration
		if raw != nil && d.UnmarshalJSON(raw) != nil {
			return strings.Join(path, ".")
		}
	}
	return ""
}

// durationFields are the JSON paths of the dispatcher.Duration fields of
// dispatcher.Settings, in field order (["timeout"], ["commit",
// "interval"], ...).
var durationFields = jsonPathsOf(reflect.TypeFor[dispatcher.Settings](), reflect.TypeFor[dispatcher.Duration](), nil)

// jsonPathsOf is the JSON paths under prefix of t's fields of type want,
// looking into nested structs.
func jsonPathsOf(t, want reflect.Type, prefix []string) [][]string {
	var out [][]string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := append(slices.Clone(prefix), name)
		switch {
		case f.Type == want:
			out = append(out, path)
		case f.Type.Kind() == reflect.Struct:
			out = append(out, jsonPathsOf(f.Type, want, path)...)
		}
	}
	return out
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
	case asTypeError(err, &te) && te.Field != "":
		return fmt.Sprintf("field %q must be a JSON %s", specField(te.Field), contract.JSONKindOf(te.Type.Kind()))
	}
	return contract.JSONDecodeText(err)
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

// specOf describes d as the API shows it: signing secrets and keys in
// their redacted form and header values replaced by RedactedValue (see
// Spec).
func specOf(d *dispatcher.Dispatcher, paused bool) Spec {
	s := fullSpecOf(d, paused)
	s.SigningSecrets, s.SigningKeys = redactedSecrets(d), redactedKeys(d)
	for name := range s.Headers {
		s.Headers[name] = RedactedValue
	}
	return s
}

// serialized is what an api dispatcher was built from that it never gives
// back: its signing secrets and keys as sent (whsec_..., whsk_...), in
// order.
type serialized struct {
	secrets, keys []string
}

// serializedOf returns the signing secrets and keys of s.
func serializedOf(s Spec) serialized {
	return serialized{secrets: slices.Clone(s.SigningSecrets), keys: slices.Clone(s.SigningKeys)}
}

// storedSpecOf describes d as dispatchers.json keeps it: the real header
// values, and the serialized secrets and keys d was built from (a Secret
// or SigningKey never gives its key back).
func storedSpecOf(d *dispatcher.Dispatcher, paused bool, ser serialized) Spec {
	s := fullSpecOf(d, paused)
	s.SigningSecrets, s.SigningKeys = slices.Clone(ser.secrets), slices.Clone(ser.keys)
	return s
}

// fullSpecOf describes d with its real header values and no signing
// secrets or keys (specOf and storedSpecOf add them).
func fullSpecOf(d *dispatcher.Dispatcher, paused bool) Spec {
	return Spec{Settings: d.Settings(), Paused: paused}
}

// redactedSecrets and redactedKeys are the forms specOf shows (nil for a
// nil d or none).
func redactedSecrets(d *dispatcher.Dispatcher) []string {
	if d == nil {
		return nil
	}
	return stringsOf(d.SigningSecrets())
}

func redactedKeys(d *dispatcher.Dispatcher) []string {
	if d == nil {
		return nil
	}
	return stringsOf(d.SigningKeys())
}

func stringsOf[T fmt.Stringer](xs []T) []string {
	var out []string
	for _, x := range xs {
		out = append(out, x.String())
	}
	return out
}

// resolveRedacted replaces, in s, the redacted forms specOf shows by the
// values they stand for: a signing-secrets or signing-keys entry equal to
// the redacted form of one of cur's by the serialized one it was built
// from (ser, in order), a header value equal to RedactedValue by the value
// of cur's header of that name (compared without regard to case). cur is
// nil for a create. A redacted form that stands for nothing is a 400
// naming the field. s's slices and maps are copied, not changed.
func resolveRedacted(s *Spec, cur *dispatcher.Dispatcher, ser serialized) error {
	var curHeaders map[string]string
	if cur != nil {
		curHeaders = cur.Headers()
	}
	var err error
	if s.SigningSecrets, err = resolveList("signing-secrets", webhooks.SecretPrefix, "secret", "whsec_ and its base64 key",
		s.SigningSecrets, redactedSecrets(cur), ser.secrets); err != nil {
		return err
	}
	if s.SigningKeys, err = resolveList("signing-keys", webhooks.SigningKeyPrefix, "key", "whsk_ and the base64 of its 32-byte seed",
		s.SigningKeys, redactedKeys(cur), ser.keys); err != nil {
		return err
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

// resolveList is resolveRedacted for one list field: each entry of in that
// is prefix + redactedSecretMark... is replaced by stored[j], where
// shown[j] is that exact text; none matching is a 400 naming field[i].
func resolveList(field, prefix, what, hint string, in, shown, stored []string) ([]string, error) {
	if len(in) == 0 {
		return in, nil
	}
	out := slices.Clone(in)
	for i, v := range out {
		if !strings.HasPrefix(v, prefix+redactedSecretMark) {
			continue
		}
		j := slices.Index(shown, v)
		if j < 0 || j >= len(stored) {
			return nil, contract.BadRequest("invalid dispatcher: %s[%d]: %q is the redacted form of a %s this dispatcher does not have; send the %s itself (%s)", field, i, v, what, what, hint)
		}
		out[i] = stored[j]
	}
	return out, nil
}

// redactedSecretMark follows webhooks.SecretPrefix (or SigningKeyPrefix)
// in a redacted secret or key: the ellipsis and the parenthesis of their
// String (a real one is base64, which has neither).
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
