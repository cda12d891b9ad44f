package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// specFlags are the dispatcher fields create and update take as flags,
// named after the fields of the admin API's body.
type specFlags struct {
	r        *remote
	file     string
	name     string
	host     string
	patterns []string
	path     string
	timeout  time.Duration
	policy   string
	interval time.Duration
	maxCount int
	start    string
	paused   bool

	deadLetter   string
	expired      string
	ackMode      string
	abnAttempts  int
	abnDuration  time.Duration
	jitter       bool
	secrets      []string
	keys         []string
	headers      map[string]string
	cloudEvents  bool
	maxInFlight  int
	ordering     string
	maxUnacked   int
	rateLimit    float64
	rateBurst    int
	brFailures   int
	brCooloff    time.Duration
	pauseAfter   time.Duration
	adaptive     string
	batchMsgs    int
	batchBytes   int64
	batchMaxWait time.Duration
}

// addSpecFlags adds the dispatcher flags to r (--name only with withName:
// update takes the name as its argument).
func addSpecFlags(r *remote, withName bool) *specFlags {
	f := &specFlags{r: r}
	fs := r.fs
	fs.StringVar(&f.file, "file", "", `the whole dispatcher as the API's JSON body ("-": standard input), instead of the flags below`)
	if withName {
		fs.StringVar(&f.name, "name", "", "dispatcher name (required)")
	}
	fs.StringVar(&f.host, "host", "", "consumer base URL, e.g. http://localhost:8081")
	fs.Func("pattern", "topic pattern; repeat for more (* one segment, ** any number)", func(s string) error {
		f.patterns = append(f.patterns, s)
		return nil
	})
	fs.StringVar(&f.path, "path", "", "path the messages are posted to (default /mmmq/messages)")
	fs.DurationVar(&f.timeout, "timeout", 0, "timeout of one push to the consumer, e.g. 30s (default mmmq.broker.dispatch)")
	fs.StringVar(&f.policy, "commit-policy", "", "every-message or interval (default every-message)")
	fs.DurationVar(&f.interval, "commit-interval", 0, "with --commit-policy interval: commit at most this often")
	fs.IntVar(&f.maxCount, "commit-max-count", 0, "with --commit-policy interval: or after this many messages")
	fs.StringVar(&f.start, "start", "", "earliest (default: every stored message) or latest (skip what the topics hold now)")
	fs.BoolVar(&f.paused, "paused", false, "create it paused (update: --paused=false resumes it)")
	f.addDeliveryFlags()
	return f
}

// addDeliveryFlags adds the flags of the delivery settings.
func (f *specFlags) addDeliveryFlags() {
	fs := f.r.fs
	fs.StringVar(&f.deadLetter, "dead-letter", "", `dead-letter topic (default dead-letter.<name>; "" turns dead letters off: log and skip)`)
	fs.StringVar(&f.expired, "expired", "", "what happens to a message past its expiresAt (published with a ttl): skip (default: not pushed, counted) or dead-letter (to the dead-letter topic, mmmq-dl-reason expired)")
	fs.StringVar(&f.ackMode, "ack-mode", "", "body (default: the {\"acknowledgement\":...} answer) or status (any 2xx is an ACK, most 4xx a NACK)")
	fs.IntVar(&f.abnAttempts, "max-abnormal-attempts", 0, "dead-letter a message after this many abnormal answers (default 0: retry for ever)")
	fs.DurationVar(&f.abnDuration, "max-abnormal-duration", 0, "dead-letter a message still answered abnormally this long after the first time (default 0: never)")
	fs.BoolVar(&f.jitter, "backoff-jitter", false, "draw each backoff wait from (0, delay] (full jitter)")
	fs.Func("signing-secret", "sign every push with this whsec_ secret; repeat for more (rotation); replaces the list; "+
		"the redacted form get shows keeps that secret (a secret on the command line is visible to other local users: prefer --file)",
		func(s string) error {
			f.secrets = append(f.secrets, s)
			return nil
		})
	fs.Func("signing-key", "add a v1a (ed25519) signature by this whsk_ key to every push; repeat for more (rotation); replaces the list; "+
		"the redacted form get shows keeps that key (a key on the command line is visible to other local users: prefer --file)",
		func(s string) error {
			f.keys = append(f.keys, s)
			return nil
		})
	fs.Func("header", "NAME=VALUE added to every push; repeat for more; replaces all headers; the value (redacted) keeps the current one",
		func(s string) error {
			name, value, ok := strings.Cut(s, "=")
			if !ok || name == "" {
				return fmt.Errorf("want NAME=VALUE; got %q", s)
			}
			if f.headers == nil {
				f.headers = map[string]string{}
			}
			f.headers[name] = value
			return nil
		})
	fs.BoolVar(&f.cloudEvents, "cloudevents", false, "send pushes as CloudEvents 1.0 in binary mode (not with batches)")
	fs.IntVar(&f.maxInFlight, "max-in-flight", 0, "pushes of one topic outstanding at once, 1..1024 (default 1; above 1 the consumer may see them out of order)")
	fs.StringVar(&f.ordering, "ordering", "", "topic, key or none (default topic with max-in-flight 1 and no batch, else none); key keeps each ordering key's order and parks a failing key alone")
	fs.IntVar(&f.maxUnacked, "max-unacked", 0, "with --ordering key: the most messages past the checkpoint, 1..100000000 (default 1000000)")
	fs.Var((*finiteFloat)(&f.rateLimit), "rate-limit", "push at most this many messages per second, summed over the dispatcher's topics on this node, 0..1000000 (default 0: off; 0.5 is one every 2s); on update 0 clears the burst too unless --rate-burst is given")
	fs.IntVar(&f.rateBurst, "rate-burst", 0, "with --rate-limit: the token bucket's size in messages, also the most per batch, 1..1000000 (default max(1, ceil(rate-limit)))")
	fs.IntVar(&f.brFailures, "breaker-failures", 0, "open the circuit breaker after this many consecutive abnormal answers over the dispatcher's topics on this node: no push to the host for a cool-off, then one probe, 0..1000000 (default 0: off; on update 0 clears the cool-off too unless --breaker-cooloff is given)")
	fs.DurationVar(&f.brCooloff, "breaker-cooloff", 0, "with --breaker-failures: the first cool-off before the probe, doubling after each failed probe up to the broker's backoff-max (default 0: the broker's backoff-initial)")
	fs.DurationVar(&f.pauseAfter, "pause-after", 0, "pause the dispatcher once its endpoint has failed this long without a single ACK or NACK (default 0: never); resume it to deliver again")
	fs.StringVar(&f.adaptive, "adaptive-concurrency", "", "off (default: max-in-flight fixed per topic) or aimd: the dispatcher's pushes outstanding over its topics on this node move between 1 and --max-in-flight (2 or more), down on 429, 503, timeouts and latency rises, up on fast answers")
	fs.IntVar(&f.batchMsgs, "batch-max-messages", 0, "send up to this many messages per push, as a JSON array (default 0: one per push)")
	fs.Int64Var(&f.batchBytes, "batch-max-bytes", 0, "with batches: at most this many stored-message bytes per push (default 1048576)")
	fs.DurationVar(&f.batchMaxWait, "batch-max-wait", 0, "with batches: wait this long for a batch to fill (default 0: send at once)")
}

// specFlagNames are the flags that are a field of the dispatcher.
var specFlagNames = []string{"name", "host", "pattern", "path", "timeout", "commit-policy", "commit-interval", "commit-max-count", "start", "paused",
	"dead-letter", "expired", "ack-mode", "max-abnormal-attempts", "max-abnormal-duration", "backoff-jitter", "signing-secret", "signing-key", "header",
	"cloudevents", "max-in-flight", "ordering", "max-unacked", "rate-limit", "rate-burst", "breaker-failures", "breaker-cooloff", "pause-after", "adaptive-concurrency", "batch-max-messages", "batch-max-bytes", "batch-max-wait"}

// given returns the dispatcher flags set on the command line.
func (f *specFlags) given() []string {
	set := map[string]bool{}
	f.r.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var out []string
	for _, n := range specFlagNames {
		if set[n] {
			out = append(out, "--"+n)
		}
	}
	return out
}

// apply sets the fields of s that were given as flags. Turning the rate
// limit or the breaker off (--rate-limit 0, --breaker-failures 0) clears
// its companion setting (rate-burst, breaker-cooloff) unless that is given
// too: update keeps the fields not given, and the broker refuses a burst
// without a limit and a cool-off without a breaker.
func (f *specFlags) apply(s *admin.Spec) {
	commit := func() *dispatcher.CommitSettings { return &s.Commit }
	set := map[string]bool{}
	f.r.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["rate-limit"] && f.rateLimit == 0 && !set["rate-burst"] {
		s.RateBurst = 0
	}
	if set["breaker-failures"] && f.brFailures == 0 && !set["breaker-cooloff"] {
		s.BreakerCooloff = 0
	}
	f.r.fs.Visit(func(fl *flag.Flag) {
		if f.applyDelivery(s, fl.Name) {
			return
		}
		switch fl.Name {
		case "name":
			s.Name = f.name
		case "host":
			s.Host = f.host
		case "pattern":
			s.Patterns = f.patterns
		case "path":
			s.Path = f.path
		case "timeout":
			s.Timeout = dispatcher.Duration(f.timeout)
		case "commit-policy":
			commit().Policy = dispatcher.CommitMode(f.policy)
		case "commit-interval":
			commit().Interval = dispatcher.Duration(f.interval)
		case "commit-max-count":
			commit().MaxCount = f.maxCount
		case "start":
			s.Start = f.start
		case "paused":
			s.Paused = f.paused
		}
	})
}

// applyDelivery sets the delivery field of s that flag name is, and
// reports whether it is one.
func (f *specFlags) applyDelivery(s *admin.Spec, name string) bool {
	batch := func() *dispatcher.BatchSettings { return &s.Batch }
	switch name {
	case "dead-letter":
		s.DeadLetter = &f.deadLetter
	case "expired":
		s.Expired = dispatcher.ExpiredAction(f.expired)
	case "ack-mode":
		s.AckMode = dispatcher.AckMode(f.ackMode)
	case "max-abnormal-attempts":
		s.MaxAbnormalAttempts = f.abnAttempts
	case "max-abnormal-duration":
		s.MaxAbnormalDuration = dispatcher.Duration(f.abnDuration)
	case "backoff-jitter":
		s.BackoffJitter = f.jitter
	case "signing-secret":
		s.SigningSecrets = f.secrets
	case "signing-key":
		s.SigningKeys = f.keys
	case "header":
		s.Headers = f.headers
	case "cloudevents":
		s.CloudEvents = f.cloudEvents
	case "max-in-flight":
		s.MaxInFlight = f.maxInFlight
	case "ordering":
		s.Ordering = dispatcher.Ordering(f.ordering)
	case "max-unacked":
		s.MaxUnacked = f.maxUnacked
	case "rate-limit":
		s.RateLimit = f.rateLimit
	case "rate-burst":
		s.RateBurst = f.rateBurst
	case "breaker-failures":
		s.BreakerFailures = f.brFailures
	case "breaker-cooloff":
		s.BreakerCooloff = dispatcher.Duration(f.brCooloff)
	case "pause-after":
		s.PauseAfter = dispatcher.Duration(f.pauseAfter)
	case "adaptive-concurrency":
		s.AdaptiveConcurrency = dispatcher.AdaptiveConcurrency(f.adaptive)
	case "batch-max-messages":
		batch().MaxMessages = f.batchMsgs
	case "batch-max-bytes":
		batch().MaxBytes = f.batchBytes
	case "batch-max-wait":
		batch().MaxWait = dispatcher.Duration(f.batchMaxWait)
	default:
		return false
	}
	return true
}

// fileBody returns the body --file names (nil without --file), or the
// exit code of a usage error: --file with a dispatcher flag, or a file
// that cannot be read.
func (f *specFlags) fileBody() ([]byte, int, bool) {
	if f.file == "" {
		return nil, 0, true
	}
	if g := f.given(); len(g) > 0 {
		return nil, f.r.usageError("--file is the whole dispatcher: give no %s with it", strings.Join(g, ", ")), false
	}
	var b []byte
	var err error
	if f.file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(f.file)
	}
	if err == nil && len(strings.TrimSpace(string(b))) == 0 {
		err = errors.New("empty")
	}
	if err != nil {
		return nil, f.r.usageError("--file %s: %v", f.file, err), false
	}
	return b, 0, true
}

// seekTarget turns --to into the "to" of a seek body: "earliest",
// "latest", an offset, or {"timestamp": <unix ms>} for an RFC 3339 time
// or ts:<unix ms>.
func seekTarget(s string) (any, error) {
	if s == "earliest" || s == "latest" {
		return s, nil
	}
	bad := fmt.Errorf("--to must be earliest, latest, an offset >= 0, an RFC 3339 time (2026-01-02T15:04:05Z) or ts:<unix ms>; got %q", s)
	if ms, ok := strings.CutPrefix(s, "ts:"); ok {
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || n < 0 {
			return nil, bad
		}
		return map[string]int64{"timestamp": n}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return nil, bad
		}
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.UnixMilli() < 0 {
		return nil, bad
	}
	return map[string]int64{"timestamp": t.UnixMilli()}, nil
}

// finiteFloat is a float64 flag that refuses NaN and ±Inf when parsed
// (flag.Float64 takes them, and JSON cannot carry them: the request body
// could not be written).
type finiteFloat float64

func (f *finiteFloat) String() string { return strconv.FormatFloat(float64(*f), 'g', -1, 64) }

func (f *finiteFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("not a number")
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return errors.New("not a finite number")
	}
	*f = finiteFloat(v)
	return nil
}
