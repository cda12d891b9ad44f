package dispatcher

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// Protocol is the URL scheme used to reach a consumer (WebProtocol in the
// original Java mmmq). Values are lower case so that they are the URL scheme.
type Protocol string

const (
	// HTTP is plain http://.
	HTTP Protocol = "http"
	// HTTPS is https:// (TLS verified against the system roots).
	HTTPS Protocol = "https"
)

// Host is a consumer's base address: scheme, host name or IP address, TCP
// port (the original Java mmmq's Host(WebProtocol.HTTP, "localhost",
// 8081)). It has no path: the path is the Dispatcher's (WithPath, default
// "/mmmq/messages").
type Host struct {
	Protocol Protocol // HTTP or HTTPS
	Address  string   // host name or IP address (IPv6 without brackets)
	Port     int      // 1..65535
}

// URL returns the base URL, e.g. http://localhost:8081 or http://[::1]:8081,
// with an empty path.
func (h Host) URL() *url.URL {
	return &url.URL{Scheme: string(h.Protocol), Host: net.JoinHostPort(h.Address, strconv.Itoa(h.Port))}
}

// String returns the base URL as text, e.g. "http://localhost:8081" (the
// form ParseHost reads and the dispatcher host configuration uses).
func (h Host) String() string { return h.URL().String() }

// Validate reports an error when the protocol is not HTTP or HTTPS, the
// address is empty or holds characters not allowed in a host name, or the
// port is outside 1..65535.
func (h Host) Validate() error {
	if h.Protocol != HTTP && h.Protocol != HTTPS {
		return fmt.Errorf("invalid host: protocol %q, want %q or %q", h.Protocol, HTTP, HTTPS)
	}
	if h.Address == "" {
		return errors.New("invalid host: empty address")
	}
	if strings.ContainsAny(h.Address, "/?#@[] \t\r\n") {
		return fmt.Errorf("invalid host: address %q is not a host name or IP address", h.Address)
	}
	if h.Port < 1 || h.Port > 65535 {
		return fmt.Errorf("invalid host: port %d outside 1..65535", h.Port)
	}
	return nil
}

// ParseHost parses "scheme://address:port" (a dispatcher's configured host
// is a base URL with nothing more), e.g. "http://localhost:8081" or
// "https://[::1]:8443". The scheme is http or https (any case); the port is
// required; user info, a path other than "/", a query or a fragment are
// errors.
func ParseHost(s string) (Host, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Host{}, fmt.Errorf("parse host %q: %w", s, err)
	}
	h := Host{Protocol: Protocol(strings.ToLower(u.Scheme)), Address: u.Hostname()}
	switch {
	case u.Scheme == "":
		return Host{}, fmt.Errorf("parse host %q: missing scheme, want scheme://address:port", s)
	case u.Opaque != "" || u.Host == "":
		return Host{}, fmt.Errorf("parse host %q: want scheme://address:port", s)
	case u.User != nil: // the message must not repeat a password
		return Host{}, fmt.Errorf("parse host %q: user info (user:password@) is not allowed; send credentials with headers", u.Redacted())
	case u.Path != "" && u.Path != "/":
		return Host{}, fmt.Errorf("parse host %q: path %q is not allowed (set the dispatcher's path instead)", s, u.Path)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return Host{}, fmt.Errorf("parse host %q: query and fragment are not allowed", s)
	case u.Port() == "":
		return Host{}, fmt.Errorf("parse host %q: missing port, want scheme://address:port", s)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return Host{}, fmt.Errorf("parse host %q: port %q: %w", s, u.Port(), err)
	}
	h.Port = port
	if err := h.Validate(); err != nil {
		return Host{}, fmt.Errorf("parse host %q: %w", s, err)
	}
	return h, nil
}

// CommitMode says when a worker commits its checkpoint: the value of a
// dispatcher's commit.policy key, "every-message" or "interval"; the empty
// value means EveryMessage.
type CommitMode string

const (
	// EveryMessage commits (write + fsync) after every message, before the
	// next is sent. The default.
	EveryMessage CommitMode = "every-message"
	// Interval commits at most once per CommitPolicy.Interval or once every
	// CommitPolicy.MaxCount messages, and always before the worker waits
	// (no more data, or a backoff) and when it stops. A crash redelivers at
	// most the messages finished since the last commit: delivery stays
	// at-least-once, only the number of duplicates grows.
	Interval CommitMode = "interval"
)

// CommitPolicy is when a dispatcher's workers commit. The zero value is
// EveryMessage.
type CommitPolicy struct {
	// Mode is EveryMessage (default) or Interval.
	Mode CommitMode
	// Interval (Interval mode) is the shortest time between two commits
	// while messages keep flowing; 0 means no time trigger.
	Interval time.Duration
	// MaxCount (Interval mode) commits once this many messages are finished
	// but uncommitted; 0 means no count trigger.
	MaxCount int
}

// Validate reports an unknown mode, a negative Interval or MaxCount, or an
// Interval policy with neither trigger set.
func (p CommitPolicy) Validate() error {
	switch p.Mode {
	case "", EveryMessage:
	case Interval:
		if p.Interval < 0 || p.MaxCount < 0 {
			return fmt.Errorf("invalid commit policy: negative interval %s or max count %d", p.Interval, p.MaxCount)
		}
		if p.Interval == 0 && p.MaxCount == 0 {
			return errors.New("invalid commit policy: interval mode needs an interval or a max count")
		}
	default:
		return fmt.Errorf("invalid commit policy: unknown mode %q", p.Mode)
	}
	return nil
}

// Dispatcher is one named push subscription: the topics matching any of its
// patterns are sent to its consumer host (the original Java mmmq built one
// the same way: new Dispatcher(name, host, List.of(patterns)); in Go it is
// dispatcher.New(name, host, patterns...)). Its name is also its checkpoint
// file name, so renaming a dispatcher replays every topic from offset 0.
//
// A Dispatcher is immutable: the With methods return a modified copy, so one
// may be shared freely between goroutines. Build it with New; provide it to
// the value group with Provide.
type Dispatcher struct {
	name     string
	host     Host
	patterns []Pattern
	path     string
	timeout  time.Duration
	commit   CommitPolicy
	start    string // StartEarliest ("") or StartLatest
	source   string // where it was declared, for error messages (see WithSource)
	dl       delivery
}

// Start positions of a new dispatcher (WithStart): where it begins on a
// topic it has no checkpoint for.
const (
	// StartEarliest replays every stored message from the log start (the
	// original Java mmmq: a new dispatcher starts at offset 0). The default.
	StartEarliest = "earliest"
	// StartLatest skips what the topics hold when the dispatcher starts:
	// on each topic that exists then, it begins at the high watermark;
	// a topic created later is delivered from its start.
	StartLatest = "latest"
)

// WithStart returns a copy of d with start position s (StartEarliest,
// StartLatest; "" is StartEarliest).
func (d *Dispatcher) WithStart(s string) *Dispatcher {
	c := *d
	c.start = s
	return &c
}

// Start is the start position (StartEarliest or StartLatest).
func (d *Dispatcher) Start() string {
	if d.start == "" {
		return StartEarliest
	}
	return d.start
}

// New returns a dispatcher named name that sends the topics matching any of
// patterns to host. Nothing is checked here; Validate (called by NewSet)
// reports a bad name, host or an empty pattern list.
func New(name string, host Host, patterns ...Pattern) *Dispatcher {
	return &Dispatcher{name: name, host: host, patterns: append([]Pattern(nil), patterns...),
		commit: CommitPolicy{Mode: EveryMessage}}
}

// WithPath returns a copy of d posting to path p on the host (must start
// with '/'); "" means the manager's default, "/mmmq/messages".
func (d *Dispatcher) WithPath(p string) *Dispatcher {
	c := *d
	c.path = p
	return &c
}

// WithTimeout returns a copy of d whose delivery attempts each time out
// after t (connect, send, headers and body); 0 means the manager's default,
// 30 s. A timeout is an abnormal response, retried with backoff.
func (d *Dispatcher) WithTimeout(t time.Duration) *Dispatcher {
	c := *d
	c.timeout = t
	return &c
}

// WithCommitPolicy returns a copy of d with commit policy p; an empty
// p.Mode is taken as EveryMessage.
func (d *Dispatcher) WithCommitPolicy(p CommitPolicy) *Dispatcher {
	c := *d
	if p.Mode == "" {
		p.Mode = EveryMessage
	}
	c.commit = p
	return &c
}

// Name is the dispatcher's name: the mmmq-consumer-id header and the
// checkpoint file name (<topic>/checkpoints/<name>.checkpoint).
func (d *Dispatcher) Name() string { return d.name }

// Host is the consumer's base address.
func (d *Dispatcher) Host() Host { return d.host }

// Patterns returns a copy of the dispatcher's patterns.
func (d *Dispatcher) Patterns() []Pattern { return append([]Pattern(nil), d.patterns...) }

// Path is the path set with WithPath; "" means the default.
func (d *Dispatcher) Path() string { return d.path }

// Timeout is the per-attempt timeout set with WithTimeout; 0 means the
// default.
func (d *Dispatcher) Timeout() time.Duration { return d.timeout }

// CommitPolicy is the commit policy (zero value: EveryMessage).
func (d *Dispatcher) CommitPolicy() CommitPolicy { return d.commit }

// Matches reports whether topic matches any of the dispatcher's patterns
// under the reserved-prefix rule (contract.Pattern.Reaches): a topic under
// DeadLetterPrefix matches only a pattern whose first segment is literally
// "dead-letter", so "**" or "*.x" never deliver dead letters and a dead
// letter cannot loop back to the consumer that refused it. For the same
// reason a dispatcher never matches its own dead-letter topic (a custom
// one under its patterns, or dead-letter.<name> for "dead-letter.**").
func (d *Dispatcher) Matches(topic string) bool {
	if dl := d.DeadLetter(); dl != "" && topic == dl {
		return false
	}
	for _, p := range d.patterns {
		if p.Reaches(topic) {
			return true
		}
	}
	return false
}

// Validate reports, naming the dispatcher, an invalid name (the rules of
// contract.ValidCheckpointName: 1-200 of [A-Za-z0-9_.-], not starting with
// '.'), an invalid host, no patterns or a zero Pattern, a path not starting
// with '/' or holding '?', '#' or spaces, a negative timeout or an invalid
// commit policy.
func (d *Dispatcher) Validate() error {
	if d == nil {
		return errors.New("dispatcher is nil")
	}
	var errs []error
	if err := contract.ValidCheckpointName(d.name); err != nil {
		errs = append(errs, fmt.Errorf("name: %w", err))
	}
	if err := d.host.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(d.patterns) == 0 {
		errs = append(errs, errors.New("no topic patterns"))
	}
	for i, p := range d.patterns {
		if p.IsZero() {
			errs = append(errs, fmt.Errorf("pattern %d is the zero Pattern (use ParsePattern or MustPattern)", i))
		}
	}
	if d.path != "" && (!strings.HasPrefix(d.path, "/") || strings.ContainsAny(d.path, "?# \t\r\n")) {
		errs = append(errs, fmt.Errorf("invalid path %q: want an absolute path such as /mmmq/messages", d.path))
	}
	if d.timeout < 0 {
		errs = append(errs, fmt.Errorf("negative timeout %s", d.timeout))
	}
	if err := d.commit.Validate(); err != nil {
		errs = append(errs, err)
	}
	if d.start != "" && d.start != StartEarliest && d.start != StartLatest {
		errs = append(errs, fmt.Errorf("start %q: want %q or %q", d.start, StartEarliest, StartLatest))
	}
	errs = append(errs, d.validateDelivery()...)
	if len(errs) > 0 {
		return fmt.Errorf("dispatcher %q: %w", d.name, errors.Join(errs...))
	}
	return nil
}

// String returns "name -> http://host:port [pattern ...]" for logs.
func (d *Dispatcher) String() string {
	ps := make([]string, len(d.patterns))
	for i, p := range d.patterns {
		ps[i] = p.String()
	}
	return fmt.Sprintf("%s -> %s [%s]", d.name, d.host, strings.Join(ps, " "))
}
