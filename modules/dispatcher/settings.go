package dispatcher

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/webhooks"
)

// AckMode says how a consumer's HTTP answer is read (a dispatcher's
// ack-mode key).
type AckMode string

const (
	// AckBody is the original Java mmmq's contract, the default: a 2xx whose
	// body is {"acknowledgement":"ACK"} or {"acknowledgement":"NACK"} is a
	// normal answer; anything else is abnormal (backoff).
	AckBody AckMode = "body"
	// AckStatus reads the status only, for plain webhook receivers: any 2xx
	// is an ACK; a 4xx other than 408, 409, 425 and 429 is a NACK (resends,
	// then the dead letter); 408, 409, 425, 429, 3xx, 5xx, timeouts and
	// connection errors are abnormal (backoff). Redirects are never followed.
	AckStatus AckMode = "status"
)

// DeadLetterPrefix starts every dead-letter topic: a dispatcher's default
// dead-letter topic is DeadLetterPrefix + its name. It is
// contract.DeadLetterPrefix, a reserved prefix: patterns reach topics
// under it only when they name it (contract.Pattern.Reaches), so "**"
// does not loop dead letters back to a consumer.
const DeadLetterPrefix = contract.DeadLetterPrefix

// AbnormalLimit bounds the abnormal answers (connection errors, timeouts,
// 5xx, ...) one message may get before it is dead-lettered. The zero value
// is the original Java mmmq's rule: retried with backoff until the consumer
// answers normally, for ever.
type AbnormalLimit struct {
	// MaxAttempts dead-letters a message after this many abnormal answers
	// (0: no count limit).
	MaxAttempts int
	// MaxDuration dead-letters a message once this long has passed since its
	// first abnormal answer and another abnormal answer comes (0: no time
	// limit).
	MaxDuration time.Duration
}

// Enabled reports whether a limit is set.
func (l AbnormalLimit) Enabled() bool { return l.MaxAttempts > 0 || l.MaxDuration > 0 }

// Batch groups messages into one push (a dispatcher's batch key): one POST
// carries a JSON array of up to MaxMessages stored messages, each with its
// "offset" added, of at most MaxBytes in all. The zero value (MaxMessages
// 0) sends one message per push.
type Batch struct {
	// MaxMessages is the most messages per push; 0 turns batching off.
	MaxMessages int
	// MaxBytes caps the summed stored-message bytes of a push (a single
	// larger message still goes alone). 0 means DefaultBatchMaxBytes.
	MaxBytes int64
	// MaxWait is how long a worker waits for a batch to fill before it
	// sends what it has; 0 sends at once.
	MaxWait time.Duration
}

// DefaultBatchMaxBytes is Batch.MaxBytes when unset: 1 MiB.
const DefaultBatchMaxBytes = 1 << 20

// Ordering is what order a dispatcher's pushes of one topic keep (a
// dispatcher's ordering key). A topic's (dispatcher, topic) worker is the
// unit of order: messages of different topics are never ordered with each
// other, whatever the ordering.
type Ordering string

const (
	// OrderTopic is the original Java mmmq's strict order: one push at a
	// time, in offset order; a NACKed message is sent again before any
	// later one, and an abnormal answer makes the whole topic wait. It
	// needs max-in-flight 1 and no batch (a NACKed batch member is resent
	// alone, out of order).
	OrderTopic Ordering = "topic"
	// OrderKey keeps the order of messages with the same ordering key (the
	// message's "key"): up to max-in-flight pushes outstanding, at most one
	// per key. A key whose message is NACKed or answered abnormally is
	// parked: its later messages wait out its backoff, every other key
	// keeps flowing. Messages without a key are unordered among themselves,
	// and each is parked alone.
	OrderKey Ordering = "key"
	// OrderNone is no order: up to max-in-flight pushes outstanding, and an
	// abnormal answer makes the whole topic wait (max-in-flight > 1 before
	// orderings existed).
	OrderNone Ordering = "none"
)

// DefaultMaxUnacked is a dispatcher's max-unacked when unset: the most
// messages past the checkpoint under OrderKey.
const DefaultMaxUnacked = 1_000_000

// Limits on the delivery settings, checked by Validate.
const (
	// MaxInFlightLimit is the largest max-in-flight accepted.
	MaxInFlightLimit = 1024
	// MaxUnackedLimit is the largest max-unacked accepted: about 8 bytes of
	// memory per message past the checkpoint (see OrderKey's docs).
	MaxUnackedLimit = 100_000_000
	// MaxBatchMessages is the largest batch max-messages accepted.
	MaxBatchMessages = 10000
	// MaxRateLimit is the largest rate-limit accepted, in messages per
	// second.
	MaxRateLimit = 1_000_000
	// MaxRateBurst is the largest rate-burst accepted, in messages.
	MaxRateBurst = 1_000_000
	// MaxBreakerFailures is the largest breaker-failures accepted.
	MaxBreakerFailures = 1_000_000
)

// delivery holds a dispatcher's delivery settings (the zero value: the
// original Java mmmq's behaviour, with dead letters on).
type delivery struct {
	deadLetter  *string // nil: DeadLetterPrefix+name; "": log and skip
	ackMode     AckMode // "": AckBody
	abnormal    AbnormalLimit
	jitter      bool
	secrets     []webhooks.Secret
	keys        []webhooks.SigningKey
	signer      *webhooks.Signer // from secrets and keys; nil: unsigned
	headers     map[string]string
	cloudEvents bool
	maxInFlight int // 0: 1
	batch       Batch
	ordering    Ordering // "": OrderTopic or OrderNone, from max-in-flight and batch
	maxUnacked  int      // 0: DefaultMaxUnacked
	rateLimit   float64  // messages per second; 0: off
	rateBurst   int      // 0: max(1, ceil(rateLimit))
	// breakerFailures: consecutive abnormal answers that open the
	// circuit breaker (0: off); breakerCooloff its first cool-off (0: the
	// broker's BackoffInitial).
	breakerFailures int
	breakerCooloff  time.Duration
	pauseAfter      time.Duration       // 0: never paused automatically
	adaptive        AdaptiveConcurrency // "": AdaptiveOff
	deadLetterSet   bool                // WithDeadLetter was called
	expired         ExpiredAction       // "": ExpiredSkip
	tls             clientTLS
}

// WithDeadLetter returns a copy of d whose NACK-exhausted messages (and
// abnormal ones past its AbnormalLimit) are appended to topic; "" turns
// dead letters off: such a message is logged and skipped, the original Java
// mmmq's rule. Without it the topic is DeadLetterPrefix + the name.
func (d *Dispatcher) WithDeadLetter(topic string) *Dispatcher {
	c := *d
	c.dl.deadLetter, c.dl.deadLetterSet = &topic, true
	return &c
}

// DeadLetter is the dead-letter topic, "" when dead letters are off.
func (d *Dispatcher) DeadLetter() string {
	if d.dl.deadLetter != nil {
		return *d.dl.deadLetter
	}
	return DeadLetterPrefix + d.name
}

// WithAckMode returns a copy of d reading answers per m ("" is AckBody).
func (d *Dispatcher) WithAckMode(m AckMode) *Dispatcher {
	c := *d
	c.dl.ackMode = m
	return &c
}

// AckMode is AckBody (default) or AckStatus.
func (d *Dispatcher) AckMode() AckMode {
	if d.dl.ackMode == "" {
		return AckBody
	}
	return d.dl.ackMode
}

// WithAbnormalLimit returns a copy of d that dead-letters a message after
// the abnormal answers l allows (the zero l: retry for ever).
func (d *Dispatcher) WithAbnormalLimit(l AbnormalLimit) *Dispatcher {
	c := *d
	c.dl.abnormal = l
	return &c
}

// AbnormalLimit is the limit set with WithAbnormalLimit.
func (d *Dispatcher) AbnormalLimit() AbnormalLimit { return d.dl.abnormal }

// WithBackoffJitter returns a copy of d whose backoff waits are drawn
// uniformly from (0, the exponential delay] ("full jitter"), so that many
// workers failing together do not retry together. Off by default: the
// original Java mmmq waits exactly 1 s, 2 s, 4 s, ... 60 s.
func (d *Dispatcher) WithBackoffJitter(on bool) *Dispatcher {
	c := *d
	c.dl.jitter = on
	return &c
}

// BackoffJitter reports whether full jitter is on.
func (d *Dispatcher) BackoffJitter() bool { return d.dl.jitter }

// WithSigningSecrets returns a copy of d whose pushes are signed (Standard
// Webhooks): webhook-id, webhook-timestamp and webhook-signature with one
// "v1,<signature>" per secret, so that a consumer can rotate keys. No
// secrets: unsigned (the default).
func (d *Dispatcher) WithSigningSecrets(secrets ...webhooks.Secret) *Dispatcher {
	c := *d
	c.dl.secrets = slices.Clone(secrets)
	c.dl.signer = newSigner(c.dl.secrets, c.dl.keys)
	return &c
}

// SigningSecrets returns a copy of the signing secrets (they print
// redacted).
func (d *Dispatcher) SigningSecrets() []webhooks.Secret { return slices.Clone(d.dl.secrets) }

// WithSigningKeys returns a copy of d whose pushes carry one
// "v1a,<ed25519 signature>" entry per key in webhook-signature (Standard
// Webhooks' asymmetric scheme), after the "v1," entries of any signing
// secrets; several keys for rotation. The public keys are listed at
// GET /.well-known/mmmq/webhook-keys. No keys: no v1a entries (the
// default).
func (d *Dispatcher) WithSigningKeys(keys ...webhooks.SigningKey) *Dispatcher {
	c := *d
	c.dl.keys = slices.Clone(keys)
	c.dl.signer = newSigner(c.dl.secrets, c.dl.keys)
	return &c
}

// SigningKeys returns a copy of the signing keys (they print redacted;
// their Public halves are what consumers verify with).
func (d *Dispatcher) SigningKeys() []webhooks.SigningKey { return slices.Clone(d.dl.keys) }

// newSigner signs with secrets and keys; nil when there are neither.
func newSigner(secrets []webhooks.Secret, keys []webhooks.SigningKey) *webhooks.Signer {
	if len(secrets) == 0 && len(keys) == 0 {
		return nil
	}
	return webhooks.NewSignerWithKeys(secrets, keys)
}

// WithHeaders returns a copy of d that adds h to every push (for instance
// an Authorization header the consumer wants; a User-Agent replaces the
// broker's). Names are HTTP tokens, each given once whatever its case, and
// may not be Content-Type, Content-Length, Content-Encoding, Host,
// Connection, Transfer-Encoding, TE, Trailer, Upgrade, Expect, Keep-Alive,
// Proxy-Connection or start with mmmq-, webhook- or ce- (the broker's own);
// values hold no control characters. Validate reports violations.
func (d *Dispatcher) WithHeaders(h map[string]string) *Dispatcher {
	c := *d
	c.dl.headers = maps.Clone(h)
	return &c
}

// Headers returns a copy of the extra push headers.
func (d *Dispatcher) Headers() map[string]string { return maps.Clone(d.dl.headers) }

// WithCloudEvents returns a copy of d that renders each push as a
// CloudEvents 1.0 event in binary mode: ce-specversion "1.0", ce-id (the
// message id), ce-source "mmmq://<node name>/<topic>", ce-type (the topic),
// ce-time (the stored timestamp, RFC 3339) and, as the body, the message's
// content (the event data) instead of the stored message JSON. It cannot be
// combined with batches.
func (d *Dispatcher) WithCloudEvents(on bool) *Dispatcher {
	c := *d
	c.dl.cloudEvents = on
	return &c
}

// CloudEvents reports whether pushes are CloudEvents in binary mode.
func (d *Dispatcher) CloudEvents() bool { return d.dl.cloudEvents }

// WithMaxInFlight returns a copy of d with up to n pushes of one (dispatcher,
// topic) outstanding at once (1..MaxInFlightLimit; 0 is 1, the original
// Java mmmq's one at a time). With n > 1 a consumer may see messages
// concurrently and out of order; the checkpoint still only moves over a
// contiguous prefix of finished messages, so commits stay in offset order.
func (d *Dispatcher) WithMaxInFlight(n int) *Dispatcher {
	c := *d
	c.dl.maxInFlight = n
	return &c
}

// MaxInFlight is the most pushes outstanding per topic (at least 1).
func (d *Dispatcher) MaxInFlight() int { return max(d.dl.maxInFlight, 1) }

// WithBatch returns a copy of d sending batches per b (b.MaxMessages 0:
// one message per push).
func (d *Dispatcher) WithBatch(b Batch) *Dispatcher {
	c := *d
	if b.MaxMessages > 0 && b.MaxBytes == 0 {
		b.MaxBytes = DefaultBatchMaxBytes
	}
	c.dl.batch = b
	return &c
}

// Batch is the batch setting (MaxMessages 0: off).
func (d *Dispatcher) Batch() Batch { return d.dl.batch }

// WithOrdering returns a copy of d keeping o (OrderTopic, OrderKey or
// OrderNone; "" picks the default, see Ordering).
func (d *Dispatcher) WithOrdering(o Ordering) *Dispatcher {
	c := *d
	c.dl.ordering = o
	return &c
}

// Ordering is the effective ordering: the one set, else OrderTopic when
// max-in-flight is 1 and batches are off, OrderNone otherwise (so that
// settings from before orderings existed keep their behaviour).
func (d *Dispatcher) Ordering() Ordering {
	if d.dl.ordering != "" {
		return d.dl.ordering
	}
	if d.MaxInFlight() == 1 && d.dl.batch.MaxMessages == 0 {
		return OrderTopic
	}
	return OrderNone
}

// WithMaxUnacked returns a copy of d letting at most n messages past the
// checkpoint be read under OrderKey (1..MaxUnackedLimit; 0 is
// DefaultMaxUnacked): how far other keys may run ahead of a parked one.
func (d *Dispatcher) WithMaxUnacked(n int) *Dispatcher {
	c := *d
	c.dl.maxUnacked = n
	return &c
}

// MaxUnacked is the most messages past the checkpoint under OrderKey.
func (d *Dispatcher) MaxUnacked() int {
	if d.dl.maxUnacked == 0 {
		return DefaultMaxUnacked
	}
	return d.dl.maxUnacked
}

// WithRateLimit returns a copy of d that pushes at most limit messages per
// second, summed over all its topics on this node, with bursts of up to
// burst messages (a token bucket of burst tokens refilled at limit per
// second; a push takes one token per message it carries). limit 0 turns
// the limit off (the default); burst 0 is max(1, ceil(limit)). A batch
// holds at most burst messages while the limit is on. Validate refuses a
// limit outside 0..MaxRateLimit, a burst outside 0..MaxRateBurst and a
// burst without a limit.
func (d *Dispatcher) WithRateLimit(limit float64, burst int) *Dispatcher {
	c := *d
	c.dl.rateLimit, c.dl.rateBurst = limit, burst
	return &c
}

// RateLimit is the most messages per second pushed, 0 when off.
func (d *Dispatcher) RateLimit() float64 { return d.dl.rateLimit }

// RateBurst is the token bucket's size in messages: the burst set, else
// max(1, ceil(RateLimit)); 0 when the limit is off.
func (d *Dispatcher) RateBurst() int {
	switch {
	case d.dl.rateLimit <= 0:
		return 0
	case d.dl.rateBurst > 0:
		return d.dl.rateBurst
	}
	return max(1, int(math.Ceil(d.dl.rateLimit)))
}

// WithBreaker returns a copy of d whose circuit breaker opens after
// failures consecutive abnormal answers across its topics on this node
// (breaker.go): then no push goes to its host for cooloff, then one probe
// push; a failed probe doubles the cool-off, up to the broker's
// backoff-max. failures 0 turns the breaker off (the default); cooloff 0
// is the broker's backoff-initial. Validate refuses failures outside
// 0..MaxBreakerFailures, a negative cooloff and a cooloff without failures.
func (d *Dispatcher) WithBreaker(failures int, cooloff time.Duration) *Dispatcher {
	c := *d
	c.dl.breakerFailures, c.dl.breakerCooloff = failures, cooloff
	return &c
}

// BreakerFailures is the number of consecutive abnormal answers that open
// the circuit breaker, 0 when it is off.
func (d *Dispatcher) BreakerFailures() int { return d.dl.breakerFailures }

// BreakerCooloff is the breaker's first cool-off as set, 0 for the
// broker's backoff-initial.
func (d *Dispatcher) BreakerCooloff() time.Duration { return d.dl.breakerCooloff }

// WithPauseAfter returns a copy of d that pauses itself once its endpoint
// has failed without a single success for after: no ACK or NACK since its
// first abnormal answer (autopause.go). after 0 turns it off (the
// default). The pause is the admin API's pause, with reason "auto";
// Validate refuses a negative after.
func (d *Dispatcher) WithPauseAfter(after time.Duration) *Dispatcher {
	c := *d
	c.dl.pauseAfter = after
	return &c
}

// PauseAfter is how long the endpoint may fail before the dispatcher
// pauses itself, 0 when never.
func (d *Dispatcher) PauseAfter() time.Duration { return d.dl.pauseAfter }

// WithAdaptiveConcurrency returns a copy of d whose concurrency is a
// (AdaptiveOff or "": max-in-flight pushes per topic worker, fixed;
// AdaptiveAIMD: the pushes outstanding over all its topics on this node
// move between 1 and max-in-flight, concurrency.go). Validate refuses
// another value, and AdaptiveAIMD with max-in-flight 1 (nothing to
// adapt).
func (d *Dispatcher) WithAdaptiveConcurrency(a AdaptiveConcurrency) *Dispatcher {
	c := *d
	c.dl.adaptive = a
	return &c
}

// AdaptiveConcurrency is AdaptiveOff (the default) or AdaptiveAIMD.
func (d *Dispatcher) AdaptiveConcurrency() AdaptiveConcurrency {
	if d.dl.adaptive == "" {
		return AdaptiveOff
	}
	return d.dl.adaptive
}

// reservedHeader reports whether name (any case) is one the broker sets,
// or one that would change how the request is framed or encoded.
func reservedHeader(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "content-type", "content-length", "content-encoding", "host", "connection", "transfer-encoding",
		"te", "trailer", "upgrade", "expect", "keep-alive", "proxy-connection":
		return true
	}
	return strings.HasPrefix(n, "mmmq-") || strings.HasPrefix(n, "webhook-") || strings.HasPrefix(n, "ce-")
}

// traceHeader reports whether name (any case) is traceparent or
// tracestate: a push sends the message's own (HTTPSender.outgoingTrace).
func traceHeader(name string) bool {
	return strings.EqualFold(name, contract.TraceparentHeader) || strings.EqualFold(name, contract.TracestateHeader)
}

// validHeaderName reports whether name is an HTTP token (RFC 9110 5.1).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// fieldProblem is one problem of a dispatcher's delivery settings: the
// Settings key it is about ("max-in-flight", "headers",
// "batch.max-messages") and what is wrong. Dispatcher.Validate prints it as
// "field: problem"; Settings.Validate names the field under its entry's key.
type fieldProblem struct{ field, problem string }

func (p fieldProblem) Error() string { return p.field + ": " + p.problem }

// validateDelivery reports the problems of the delivery settings, each a
// fieldProblem, then those of the TLS client (validateTLS).
func (d *Dispatcher) validateDelivery() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fieldProblem{field, fmt.Sprintf(format, args...)})
	}
	if dl := d.DeadLetter(); dl != "" {
		if err := contract.ValidateTopic(dl); err != nil {
			if d.dl.deadLetterSet {
				bad("dead-letter", "%v", err)
			} else {
				bad("dead-letter", "the default dead-letter topic %q is not a valid topic name (%v): set dead-letter to a topic, or to \"\" to log and skip", dl, err)
			}
		}
	}
	switch d.dl.ackMode {
	case "", AckBody, AckStatus:
	default:
		bad("ack-mode", "must be %q or %q; got %q", AckBody, AckStatus, d.dl.ackMode)
	}
	if d.dl.abnormal.MaxAttempts < 0 {
		bad("max-abnormal-attempts", "must be >= 0 (0 = retry for ever); got %d", d.dl.abnormal.MaxAttempts)
	}
	if d.dl.abnormal.MaxDuration < 0 {
		bad("max-abnormal-duration", "must be a duration >= 0 (0 = never); got %s", d.dl.abnormal.MaxDuration)
	}
	if d.dl.abnormal.Enabled() && d.DeadLetter() == "" {
		bad("dead-letter", "is off, but max-abnormal-attempts and max-abnormal-duration need a dead-letter topic: with dead letters off, every message would be dropped while the consumer is down")
	}
	seenHeader := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(d.dl.headers)) {
		if prev, dup := seenHeader[strings.ToLower(name)]; dup {
			bad("headers", "%q and %q are the same header", prev, name)
			continue
		}
		seenHeader[strings.ToLower(name)] = name
		switch {
		case !validHeaderName(name):
			bad("headers", "%q is not a valid header name", name)
		case traceHeader(name):
			bad("headers", "%q is reserved: pushes carry each message's own W3C trace context (its stored %s and %s headers), so a dispatcher cannot set it", name, contract.TraceparentHeader, contract.TracestateHeader)
		case reservedHeader(name):
			bad("headers", "%q is set by the broker and cannot be overridden", name)
		case !contract.ValidHeaderValue(d.dl.headers[name]):
			bad("headers", "the value of %q holds control characters", name)
		}
	}
	if n := d.dl.maxInFlight; n < 0 || n > MaxInFlightLimit {
		bad("max-in-flight", "must be 1..%d (0 = 1); got %d", MaxInFlightLimit, n)
	}
	switch d.dl.ordering {
	case "", OrderKey, OrderNone:
	case OrderTopic:
		if d.MaxInFlight() != 1 || d.dl.batch.MaxMessages != 0 {
			bad("ordering", "%q needs max-in-flight 1 and no batch (several pushes at once, or a NACKed batch member resent alone, break the topic's order); got max-in-flight %d, batch.max-messages %d: use %q to keep each key's order, or %q",
				OrderTopic, d.MaxInFlight(), d.dl.batch.MaxMessages, OrderKey, OrderNone)
		}
	default:
		bad("ordering", "must be %q, %q or %q; got %q", OrderTopic, OrderKey, OrderNone, d.dl.ordering)
	}
	if n := d.dl.maxUnacked; n < 0 || n > MaxUnackedLimit {
		bad("max-unacked", "must be 1..%d (0 = %d); got %d", MaxUnackedLimit, DefaultMaxUnacked, n)
	} else if n != 0 && d.Ordering() != OrderKey {
		bad("max-unacked", "applies to ordering %q only (the ordering is %q)", OrderKey, d.Ordering())
	}
	if r := d.dl.rateLimit; math.IsNaN(r) || r < 0 || r > MaxRateLimit {
		bad("rate-limit", "must be a number of messages per second in 0..%d (0 = off); got %v", MaxRateLimit, r)
	}
	if n := d.dl.rateBurst; n < 0 || n > MaxRateBurst {
		bad("rate-burst", "must be 1..%d messages (0 = max(1, ceil(rate-limit))); got %d", MaxRateBurst, n)
	} else if n != 0 && d.dl.rateLimit == 0 {
		bad("rate-burst", "needs rate-limit (the limit is off without it)")
	}
	if n := d.dl.breakerFailures; n < 0 || n > MaxBreakerFailures {
		bad("breaker-failures", "must be 0..%d consecutive abnormal answers (0 = off); got %d", MaxBreakerFailures, n)
	}
	if c := d.dl.breakerCooloff; c < 0 {
		bad("breaker-cooloff", "must not be negative (0 = the broker's backoff-initial); got %v", c)
	} else if c != 0 && d.dl.breakerFailures == 0 {
		bad("breaker-cooloff", "needs breaker-failures (the breaker is off without it)")
	}
	switch d.dl.adaptive {
	case "", AdaptiveOff:
	case AdaptiveAIMD:
		if d.MaxInFlight() < 2 {
			bad("adaptive-concurrency", "%q needs max-in-flight 2 or more (it moves the pushes outstanding between 1 and max-in-flight; with max-in-flight %d there is nothing to adapt)",
				AdaptiveAIMD, d.MaxInFlight())
		}
	default:
		bad("adaptive-concurrency", "must be %q or %q; got %q", AdaptiveOff, AdaptiveAIMD, d.dl.adaptive)
	}
	if d.dl.pauseAfter < 0 {
		bad("pause-after", "must not be negative (0 = never paused automatically); got %v", d.dl.pauseAfter)
	}
	seenSecret := map[string]bool{}
	for i, s := range d.dl.secrets {
		if seenSecret[s.Fingerprint()] {
			bad(fmt.Sprintf("signing-secrets[%d]", i), "the same secret is given twice")
		}
		seenSecret[s.Fingerprint()] = true
	}
	seenKey := map[string]bool{}
	for i, k := range d.dl.keys {
		if seenKey[k.KeyID()] {
			bad(fmt.Sprintf("signing-keys[%d]", i), "the same key is given twice")
		}
		seenKey[k.KeyID()] = true
	}
	b := d.dl.batch
	if b.MaxMessages < 0 || b.MaxMessages > MaxBatchMessages {
		bad("batch.max-messages", "must be 0 (off) .. %d; got %d", MaxBatchMessages, b.MaxMessages)
	}
	if b.MaxBytes < 0 {
		bad("batch.max-bytes", "must be >= 0 (0 = 1 MiB); got %d", b.MaxBytes)
	}
	if b.MaxWait < 0 {
		bad("batch.max-wait", "must be a duration >= 0; got %s", b.MaxWait)
	}
	if b.MaxMessages == 0 && (b.MaxBytes != 0 || b.MaxWait != 0) {
		bad("batch", "max-bytes and max-wait need max-messages (batches are off without it)")
	}
	if b.MaxMessages > 0 && d.dl.cloudEvents {
		bad("cloudevents", "cannot be combined with batch (a binary-mode CloudEvent is one message)")
	}
	errs = append(errs, d.validateExpired()...)
	return append(errs, d.validateTLS()...)
}
