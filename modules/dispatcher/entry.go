package dispatcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/mmmq/mmmq/modules/webhooks"
)

// Settings is one dispatcher as data: the shape of a mmmq.broker.dispatchers
// entry (koanf tags, the YAML keys), of the admin API's body and of an entry
// of <root>/dispatchers.json (JSON tags, the same kebab-case names, durations
// as Go duration strings such as "30s"). The YAML list is the list section
// of plugins/configdispatchers, whose elements are Settings; the admin Spec
// is Settings plus "paused". Check one with Validate; build a Dispatcher
// with FromSettings; describe one with (*Dispatcher).Settings.
//
// Adding a key: add the field here (with both tags and a comment giving the
// default), check it in Validate, read it in FromSettings and
// Dispatcher.Settings, and document it in configs/mmmq.yaml, the OpenAPI
// document and a CLI flag; TestSettingsShapes and the shape tests of the
// CLI and the OpenAPI document fail until every shape has it.
//
//	{"name":"orders","host":"http://localhost:8081","patterns":["order.**"],
//	 "path":"/mmmq/messages","timeout":"30s",
//	 "commit":{"policy":"every-message","interval":"1s","max-count":1000},
//	 "start":"earliest","dead-letter":"dead-letter.orders","ack-mode":"body",
//	 "max-in-flight":1,"batch":{"max-messages":100,"max-wait":"50ms"}}
type Settings struct {
	// Name identifies the dispatcher and its checkpoint file; matches
	// ^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}$, unique. Required.
	Name string `koanf:"name" json:"name"`
	// Host is the consumer base URL, scheme://address:port only (http or
	// https, no path, query or fragment), e.g. "http://localhost:8081". Required.
	Host string `koanf:"host" json:"host"`
	// Patterns are the topic patterns delivered ("order.**", "payment.*");
	// at least one. Required.
	Patterns []string `koanf:"patterns" json:"patterns"`
	// Path is the request path; "" means mmmq.broker.dispatch.path.
	Path string `koanf:"path" json:"path,omitempty"`
	// Timeout bounds one attempt; 0 means mmmq.broker.dispatch.timeout.
	Timeout Duration `koanf:"timeout" json:"timeout,omitempty"`
	// Commit is the checkpoint commit policy (zero: every-message).
	Commit CommitSettings `koanf:"commit" json:"commit,omitzero"`
	// Start is where the dispatcher begins on a topic it has no checkpoint
	// for: "earliest" ("", every stored message, as the original Java mmmq
	// does) or "latest" (only messages published from then on).
	Start string `koanf:"start" json:"start,omitempty"`
	// DeadLetter is the dead-letter topic: nil means DeadLetterPrefix +
	// name, "" logs and skips (the original Java mmmq's rule).
	DeadLetter *string `koanf:"dead-letter" json:"dead-letter,omitempty"`
	// Expired is what happens to a message past its expiresAt (published
	// with a ttl) when it would be pushed: ExpiredSkip ("", default:
	// finished without a push, counted) or ExpiredDeadLetter (appended to
	// the dead-letter topic with mmmq-dl-reason "expired" first).
	Expired ExpiredAction `koanf:"expired" json:"expired,omitempty"`
	// AckMode is AckBody ("", default) or AckStatus.
	AckMode AckMode `koanf:"ack-mode" json:"ack-mode,omitempty"`
	// MaxAbnormalAttempts dead-letters a message after this many abnormal
	// answers; 0 retries for ever (the original rule).
	MaxAbnormalAttempts int `koanf:"max-abnormal-attempts" json:"max-abnormal-attempts,omitempty"`
	// MaxAbnormalDuration dead-letters a message still answered abnormally
	// this long after its first abnormal answer; 0 means never.
	MaxAbnormalDuration Duration `koanf:"max-abnormal-duration" json:"max-abnormal-duration,omitempty"`
	// BackoffJitter draws each backoff wait from (0, delay] (full jitter).
	BackoffJitter bool `koanf:"backoff-jitter" json:"backoff-jitter,omitempty"`
	// SigningSecrets sign every push (Standard Webhooks), "whsec_<base64>"
	// each; several for rotation. None: unsigned.
	SigningSecrets []string `koanf:"signing-secrets" json:"signing-secrets,omitempty"`
	// SigningKeys add a v1a (ed25519) signature per key to every push,
	// "whsk_<base64 of the 32-byte seed>" each; several for rotation.
	// None: no v1a entries.
	SigningKeys []string `koanf:"signing-keys" json:"signing-keys,omitempty"`
	// Headers are added to every push (see WithHeaders for the rules).
	Headers map[string]string `koanf:"headers" json:"headers,omitempty"`
	// CloudEvents renders pushes as CloudEvents 1.0 in binary mode.
	CloudEvents bool `koanf:"cloudevents" json:"cloudevents,omitempty"`
	// MaxInFlight is the most pushes of one topic outstanding at once,
	// 1..MaxInFlightLimit; 0 is 1.
	MaxInFlight int `koanf:"max-in-flight" json:"max-in-flight,omitempty"`
	// Batch groups messages into one push (zero: off).
	Batch BatchSettings `koanf:"batch" json:"batch,omitzero"`
	// Ordering is OrderTopic, OrderKey or OrderNone; "" is OrderTopic
	// when max-in-flight is 1 and batch is off, else OrderNone.
	Ordering Ordering `koanf:"ordering" json:"ordering,omitempty"`
	// MaxUnacked is the most messages past the checkpoint under OrderKey,
	// 1..MaxUnackedLimit; 0 is DefaultMaxUnacked (1,000,000).
	MaxUnacked int `koanf:"max-unacked" json:"max-unacked,omitempty"`
	// RateLimit is the most messages pushed per second, summed over all
	// the dispatcher's topics on this node, 0..MaxRateLimit (fractions
	// allowed: 0.5 is one message every 2 s); 0 is off (the default).
	RateLimit float64 `koanf:"rate-limit" json:"rate-limit,omitempty"`
	// RateBurst is the token bucket's size in messages (also the most
	// messages per batch), 1..MaxRateBurst, only with RateLimit; 0 is
	// max(1, ceil(rate-limit)).
	RateBurst int `koanf:"rate-burst" json:"rate-burst,omitempty"`
	// BreakerFailures opens the dispatcher's circuit breaker after this
	// many consecutive abnormal answers across its topics on this node,
	// 0..MaxBreakerFailures; 0 is off (the default).
	BreakerFailures int `koanf:"breaker-failures" json:"breaker-failures,omitempty"`
	// BreakerCooloff is the breaker's first cool-off before a probe push,
	// doubling after each failed probe up to the broker's backoff-max,
	// only with BreakerFailures; 0 is the broker's backoff-initial.
	BreakerCooloff Duration `koanf:"breaker-cooloff" json:"breaker-cooloff,omitempty"`
	// AdaptiveConcurrency is AdaptiveOff ("off"; "" is off, the default)
	// or AdaptiveAIMD ("aimd": the dispatcher's pushes outstanding over
	// all its topics on this node move between 1 and max-in-flight, which
	// must then be at least 2).
	AdaptiveConcurrency AdaptiveConcurrency `koanf:"adaptive-concurrency" json:"adaptive-concurrency,omitempty"`
	// PauseAfter pauses the dispatcher once its endpoint has answered
	// only abnormally for this long (no ACK or NACK since its first
	// abnormal answer); 0 is off (the default).
	PauseAfter Duration `koanf:"pause-after" json:"pause-after,omitempty"`
	// TLS is how HTTPS connections to the consumer are made (zero: system
	// roots, no client certificate); only with an https host.
	TLS TLSSettings `koanf:"tls" json:"tls,omitzero"`
}

// CommitSettings is a dispatcher's "commit" entry.
type CommitSettings struct {
	// Policy is EveryMessage ("", default) or Interval.
	Policy CommitMode `koanf:"policy" json:"policy,omitempty"`
	// Interval is the longest time between commits under Interval
	// (0: 1s once normalized).
	Interval Duration `koanf:"interval" json:"interval,omitempty"`
	// MaxCount is the most messages between commits under Interval
	// (0: 1000 once normalized).
	MaxCount int `koanf:"max-count" json:"max-count,omitempty"`
}

// BatchSettings is a dispatcher's "batch" entry: up to MaxMessages
// (1..MaxBatchMessages; 0 off) messages of at most MaxBytes (bytes; 0:
// DefaultBatchMaxBytes) in all per push, waiting up to MaxWait to fill.
type BatchSettings struct {
	MaxMessages int      `koanf:"max-messages" json:"max-messages,omitempty"`
	MaxBytes    int64    `koanf:"max-bytes" json:"max-bytes,omitempty"`
	MaxWait     Duration `koanf:"max-wait" json:"max-wait,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("1m30s") in
// JSON and read from one in JSON and text (YAML, environment).
type Duration time.Duration

// String writes d as a Go duration string ("30s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a string, e.g. "30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string >= 0 such as "30s"; the error says
// what is wanted (the caller names the field).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`must be a duration string such as "30s"`)
	}
	return d.UnmarshalText([]byte(s))
}

// UnmarshalText reads a duration string >= 0 such as "30s".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil || v < 0 {
		return fmt.Errorf(`must be a duration >= 0 such as "30s"; got %q`, b)
	}
	*d = Duration(v)
	return nil
}

// DefaultSettings are the element defaults of a dispatcher's settings:
// the values its zero fields take (commit policy every-message, interval
// 1s, max-count 1000), besides path and timeout, which come from
// mmmq.broker.dispatch (see WithDefaults).
var DefaultSettings = Settings{Commit: CommitSettings{Policy: EveryMessage, Interval: Duration(time.Second), MaxCount: 1000}}

// WithDefaults returns s with its zero fields filled as a YAML entry's
// are when the configuration is loaded: path and timeout from def
// (mmmq.broker.dispatch), the commit settings from DefaultSettings.
func (s Settings) WithDefaults(def Config) Settings {
	if s.Path == "" {
		s.Path = def.Path
	}
	if s.Timeout == 0 {
		s.Timeout = Duration(def.Timeout)
	}
	c, d := &s.Commit, DefaultSettings.Commit
	if c.Policy == "" {
		c.Policy = d.Policy
	}
	if c.Interval == 0 {
		c.Interval = d.Interval
	}
	if c.MaxCount == 0 {
		c.MaxCount = d.MaxCount
	}
	return s
}

// FromSettings builds the Dispatcher s describes, labelled with source (see
// WithSource). s should have its defaults filled (WithDefaults, or
// config.Normalize for a YAML entry). Errors name the field under key, e.g.
// "mmmq.broker.dispatchers[0].patterns[1]: invalid topic pattern ...".
func FromSettings(s Settings, key, source string) (*Dispatcher, error) {
	host, err := ParseHost(s.Host)
	if err != nil {
		return nil, fmt.Errorf("%s.host: %w", key, err)
	}
	pats := make([]Pattern, 0, len(s.Patterns))
	for j, p := range s.Patterns {
		pat, err := ParsePattern(p)
		if err != nil {
			return nil, fmt.Errorf("%s.patterns[%d]: %w", key, j, err)
		}
		pats = append(pats, pat)
	}
	d := New(s.Name, host, pats...).WithSource(source)
	sg, errs := s.signing()
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s.%w", key, errs[0])
	}
	d = s.apply(d, sg).WithTLS(s.TLS)
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return d, nil
}

// signing is a dispatcher's parsed signing secrets and keys.
type signing struct {
	secrets []webhooks.Secret
	keys    []webhooks.SigningKey
}

// keyError is a refused signing secret or key: the entry and why
// (wrapping webhooks.ErrInvalidSecret or ErrInvalidKey).
type keyError struct {
	field string
	err   error
}

func (e keyError) Error() string { return e.field + ": " + e.err.Error() }
func (e keyError) Unwrap() error { return e.err }

// signing parses the signing secrets and keys; each error names its entry
// ("signing-keys[1]: webhooks: invalid key: ...") and never the value.
func (s Settings) signing() (signing, []keyError) {
	var errs []keyError
	secrets := parseEach("signing-secrets", s.SigningSecrets, webhooks.ParseSecret, &errs)
	keys := parseEach("signing-keys", s.SigningKeys, webhooks.ParseSigningKey, &errs)
	return signing{secrets: secrets, keys: keys}, errs
}

// parseEach parses every entry of field with parse, adding a keyError per
// refused one to errs.
func parseEach[T any](field string, in []string, parse func(string) (T, error), errs *[]keyError) []T {
	var out []T
	for j, v := range in {
		x, err := parse(v)
		if err != nil {
			*errs = append(*errs, keyError{fmt.Sprintf("%s[%d]", field, j), err})
			continue
		}
		out = append(out, x)
	}
	return out
}

// apply returns d with every setting of s but host, patterns and TLS:
// path, timeout, commit policy, start and the delivery settings (secrets
// and keys already parsed).
func (s Settings) apply(d *Dispatcher, sg signing) *Dispatcher {
	if s.Path != "" {
		d = d.WithPath(s.Path)
	}
	if s.Timeout > 0 {
		d = d.WithTimeout(time.Duration(s.Timeout))
	}
	pol := CommitPolicy{Mode: s.Commit.Policy}
	if s.Commit.Policy == Interval {
		pol.Interval, pol.MaxCount = time.Duration(s.Commit.Interval), s.Commit.MaxCount
	}
	d = d.WithCommitPolicy(pol).WithStart(s.Start)
	if s.DeadLetter != nil {
		d = d.WithDeadLetter(*s.DeadLetter)
	}
	return d.WithAckMode(s.AckMode).
		WithExpired(s.Expired).
		WithAbnormalLimit(AbnormalLimit{MaxAttempts: s.MaxAbnormalAttempts, MaxDuration: time.Duration(s.MaxAbnormalDuration)}).
		WithBackoffJitter(s.BackoffJitter).
		WithSigningSecrets(sg.secrets...).
		WithSigningKeys(sg.keys...).
		WithHeaders(s.Headers).
		WithCloudEvents(s.CloudEvents).
		WithMaxInFlight(s.MaxInFlight).
		WithBatch(Batch{MaxMessages: s.Batch.MaxMessages, MaxBytes: s.Batch.MaxBytes, MaxWait: time.Duration(s.Batch.MaxWait)}).
		WithOrdering(s.Ordering).
		WithMaxUnacked(s.MaxUnacked).
		WithRateLimit(s.RateLimit, s.RateBurst).
		WithBreaker(s.BreakerFailures, time.Duration(s.BreakerCooloff)).
		WithAdaptiveConcurrency(s.AdaptiveConcurrency).
		WithPauseAfter(time.Duration(s.PauseAfter))
}

// Settings describes d with its effective values: the default path,
// timeout, commit policy, dead-letter topic, expired, ack mode,
// max-in-flight and ordering written out, max-unacked only as set
// (ordering key, not 0), rate-limit and rate-burst as set (0: off, the
// default burst), adaptive-concurrency only when aimd; Batch only when on, TLS only when set. SigningSecrets and
// SigningKeys are empty: a webhooks.Secret or SigningKey never gives its
// key back (the admin API adds the redacted or stored forms).
func (d *Dispatcher) Settings() Settings {
	s := Settings{Name: d.Name(), Host: d.Host().String(), Path: d.Path(), Timeout: Duration(d.Timeout()), Start: d.Start()}
	for _, p := range d.Patterns() {
		s.Patterns = append(s.Patterns, p.String())
	}
	pol := d.CommitPolicy()
	s.Commit = CommitSettings{Policy: pol.Mode, Interval: Duration(pol.Interval), MaxCount: pol.MaxCount}
	if s.Commit.Policy == "" {
		s.Commit.Policy = EveryMessage
	}
	dl := d.DeadLetter()
	lim := d.AbnormalLimit()
	s.DeadLetter, s.AckMode, s.Expired = &dl, d.AckMode(), d.Expired()
	s.MaxAbnormalAttempts, s.MaxAbnormalDuration = lim.MaxAttempts, Duration(lim.MaxDuration)
	s.BackoffJitter, s.CloudEvents, s.MaxInFlight = d.BackoffJitter(), d.CloudEvents(), d.MaxInFlight()
	if h := d.Headers(); len(h) > 0 {
		s.Headers = h
	}
	if b := d.Batch(); b.MaxMessages > 0 {
		s.Batch = BatchSettings{MaxMessages: b.MaxMessages, MaxBytes: b.MaxBytes, MaxWait: Duration(b.MaxWait)}
	}
	s.Ordering = d.Ordering()
	if s.Ordering == OrderKey {
		// As set (0: the default): so that switching a dispatcher shown
		// with its default to another ordering needs no other change.
		s.MaxUnacked = d.dl.maxUnacked
	}
	// The burst as set (0: the default): so that changing the limit alone
	// changes the default burst with it.
	s.RateLimit, s.RateBurst = d.dl.rateLimit, d.dl.rateBurst
	// The cool-off as set (0: the broker's backoff-initial).
	s.BreakerFailures, s.BreakerCooloff = d.dl.breakerFailures, Duration(d.dl.breakerCooloff)
	if d.AdaptiveConcurrency() == AdaptiveAIMD {
		s.AdaptiveConcurrency = AdaptiveAIMD // off is left out, as a rate limit that is off
	}
	s.PauseAfter = Duration(d.dl.pauseAfter)
	s.TLS = d.TLS()
	return s
}

// SettingsKeys returns the keys of Settings in field order, nested keys
// dotted under their entry ("commit.policy", "tls.ca-file"): the names every
// shape of a dispatcher (YAML entry, API body, dispatchers.json, CLI flags,
// OpenAPI schema) must carry. The tests of those shapes check them against it.
func SettingsKeys() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for f := range t.Fields() {
			key := prefix + f.Tag.Get("koanf")
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, key+".")
				continue
			}
			out = append(out, key)
		}
	}
	walk(reflect.TypeFor[Settings](), "")
	return out
}
