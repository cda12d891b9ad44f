package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/mmmq/mmmq/modules/contract"
)

// dispatcherNameRE is the allowed dispatcher name; the name is also a file
// name (checkpoints/<name>.checkpoint), hence no "/" and no leading ".".
var dispatcherNameRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}$`)

// Validate checks every value, the sections held included (with their own
// validation and cross checks; a section not held is at its defaults),
// and returns all problems joined with errors.Join, each a [*KeyError]
// naming its key and what is allowed. Only the first cause is reported: a
// key whose bound comes from an invalid key (a section's cross check sees
// it with [View.Failed]) is then checked against its own limits only, and a
// dispatcher's path or timeout inherited from an invalid
// mmmq.broker.dispatch key is not reported again. It
// expects a normalized Config (see [Config.Normalize]) but accepts the zero
// "inherit" values of dispatcher path, timeout and commit settings.
func (c *Config) Validate() error {
	var v validator

	s := c.Server
	v.intRange("server.port", int64(s.Port), 0, 65535) // 0 = any free port (tests)
	v.positive("server.read-header-timeout", s.ReadHeaderTimeout)
	v.positive("server.read-timeout", s.ReadTimeout)
	v.positive("server.write-timeout", s.WriteTimeout)
	v.positive("server.idle-timeout", s.IdleTimeout)
	v.positive("server.shutdown-timeout", s.ShutdownTimeout)
	v.intRange("server.max-body-bytes", s.MaxBodyBytes, 1024, math.MaxInt64)
	v.intRange("server.max-connections", int64(s.MaxConnections), 0, math.MaxInt32)
	v.serverTLS(s.TLS)

	if _, err := zapcore.ParseLevel(c.Logging.Level); err != nil {
		v.add(invalid("logging.level", "must be one of debug, info, warn, error, dpanic, panic, fatal; got %q", c.Logging.Level))
	}
	switch c.Logging.Format {
	case FormatJSON, FormatConsole:
	default:
		v.add(invalid("logging.format", "must be %q or %q; got %q", FormatJSON, FormatConsole, c.Logging.Format))
	}

	b := c.MMMQ.Broker
	// The sections first, so that a dispatcher's inherited path or timeout
	// already reported under mmmq.broker.dispatch is not reported again;
	// their problems are listed after the core keys'. Their cross checks
	// last, when every other problem is known.
	secErrs := c.validateSections(&v)
	seen := map[string]int{}
	def := inherited{path: c.lookup(dispatchPathKey), timeout: c.lookup(dispatchTimeoutKey)}
	for i, dc := range b.Dispatchers {
		v.dispatcher(fmt.Sprintf("%s[%d]", dispatchersKey, i), dc, def, seen, i)
	}

	v.auth(c.MMMQ.Auth)

	secErrs = append(secErrs, c.crossCheckSections(&v)...)
	v.errs = append(v.errs, secErrs...)
	return errors.Join(v.errs...)
}

// serverTLS checks server.tls: the files come in pairs, a client CA only
// with a client-auth that uses it, and the reverse. Whether the files can be
// read is checked when the listeners are built (package servertls).
func (v *validator) serverTLS(t ServerTLSConfig) {
	const k = "server.tls."
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		v.add(invalid(k+"key-file", "must be set when server.tls.cert-file is set (the certificate's private key, PEM)"))
	case t.CertFile == "" && t.KeyFile != "":
		v.add(invalid(k+"cert-file", "must be set when server.tls.key-file is set (the certificate chain, PEM)"))
	}
	switch t.ClientAuth {
	case ClientAuthNone:
		if t.ClientCAFile != "" {
			v.add(invalid(k+"client-auth", "is %q but server.tls.client-ca-file is set: set it to %q or %q (or remove the CA file)",
				t.ClientAuth, ClientAuthVerifyIfGiven, ClientAuthRequire))
		}
	case ClientAuthVerifyIfGiven, ClientAuthRequire:
		if t.ClientCAFile == "" {
			v.add(invalid(k+"client-ca-file", "must be set when server.tls.client-auth is %q (the CAs client certificates are verified against, PEM)", t.ClientAuth))
		}
		if t.CertFile == "" {
			v.add(invalid(k+"client-auth", "is %q but TLS is off: set server.tls.cert-file and server.tls.key-file", t.ClientAuth))
		}
	default:
		v.add(invalid(k+"client-auth", "must be %q, %q or %q; got %q", ClientAuthNone, ClientAuthVerifyIfGiven, ClientAuthRequire, t.ClientAuth))
	}
}

// validator collects the problems of one Validate and remembers which keys
// had one, so that a check derived from such a key (a bound, an inherited
// value) is skipped instead of reporting a follow-on error.
type validator struct {
	errs []error
	bad  map[string]bool // keys with a problem
}

func (v *validator) add(err error) {
	v.errs = append(v.errs, err)
	v.mark(err)
}

// mark remembers the key of err, a *KeyError, as failed.
func (v *validator) mark(err error) {
	var ke *KeyError
	if errors.As(err, &ke) {
		if v.bad == nil {
			v.bad = map[string]bool{}
		}
		v.bad[ke.Key] = true
	}
}

// failed says whether key already had a problem.
func (v *validator) failed(key string) bool { return v.bad[key] }

func (v *validator) intRange(key string, n, lo, hi int64) {
	switch {
	case n >= lo && n <= hi:
	case hi == math.MaxInt64:
		v.add(invalid(key, "must be at least %d; got %d", lo, n))
	default:
		v.add(invalid(key, "must be between %d and %d; got %d", lo, hi, n))
	}
}

// nonNegative checks a duration >= 0; zero says what 0 means for key
// ("keep forever", "off").
func (v *validator) nonNegative(key string, d time.Duration, zero string) {
	if d < 0 {
		v.add(invalid(key, "must be a duration >= 0 such as \"168h\" (0 = %s); got %s", zero, d))
	}
}

func (v *validator) positive(key string, d time.Duration) {
	if d <= 0 {
		v.add(invalid(key, "must be a duration > 0 such as \"30s\"; got %s", d))
	}
}

// pattern checks a topic pattern with the parser serve uses
// (contract.ValidatePattern) and reports whether it is valid.
func (v *validator) pattern(key, p string) bool {
	if strings.TrimSpace(p) == "" {
		v.add(invalid(key, "must not be empty"))
		return false
	}
	if err := contract.ValidatePattern(p); err != nil {
		v.add(invalid(key, "%v", err))
		return false
	}
	return true
}

func (v *validator) path(key, p string) {
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?# ") {
		v.add(invalid(key, "must start with \"/\" and hold no query, fragment or spaces; got %q", p))
	}
}

// inherited are the values of mmmq.broker.dispatch.path and .timeout.
type inherited struct{ path, timeout any }

// dispatcher checks one dispatcher; def holds mmmq.broker.dispatch's path
// and timeout, which a dispatcher inherits (see Normalize): an inherited
// value that is already reported under mmmq.broker.dispatch is not
// reported again.
func (v *validator) dispatcher(key string, d DispatcherConfig, def inherited, seen map[string]int, i int) {
	if !dispatcherNameRE.MatchString(d.Name) {
		v.add(invalid(key+".name", "must match %s; got %q", dispatcherNameRE, d.Name))
	} else if j, dup := seen[d.Name]; dup {
		v.add(invalid(key+".name", "duplicate dispatcher name %q (also %s[%d])", d.Name, dispatchersKey, j))
	} else {
		seen[d.Name] = i
	}
	if err := checkHost(d.Host); err != nil {
		v.add(invalid(key+".host", "must be scheme://address:port with scheme http or https and no path, query or fragment (e.g. \"http://localhost:8081\"): %v", err))
	}
	if len(d.Patterns) == 0 {
		v.add(invalid(key+".patterns", "must list at least one topic pattern"))
	}
	for j, p := range d.Patterns {
		v.pattern(fmt.Sprintf("%s.patterns[%d]", key, j), p)
	}
	inheritsBad := func(own, inherited any, defKey string) bool {
		return own == inherited && v.failed(defKey)
	}
	if d.Path != "" && !inheritsBad(d.Path, def.path, dispatchPathKey) {
		v.path(key+".path", d.Path)
	}
	if d.Start != "" && d.Start != "earliest" && d.Start != "latest" {
		v.add(invalid(key+".start", "must be \"earliest\" or \"latest\"; got %q", d.Start))
	}
	if d.Timeout < 0 && !inheritsBad(d.Timeout, def.timeout, dispatchTimeoutKey) {
		v.add(invalid(key+".timeout", "must be a duration > 0 such as \"30s\" (or absent); got %s", d.Timeout))
	}
	switch d.Commit.Policy {
	case "", CommitEveryMessage, CommitInterval:
	default:
		v.add(invalid(key+".commit.policy", "must be %q or %q; got %q", CommitEveryMessage, CommitInterval, d.Commit.Policy))
	}
	if d.Commit.Interval < 0 {
		v.add(invalid(key+".commit.interval", "must be a duration > 0 such as \"1s\"; got %s", d.Commit.Interval))
	}
	if d.Commit.MaxCount < 0 {
		v.add(invalid(key+".commit.max-count", "must be at least 1; got %d", d.Commit.MaxCount))
	}
	v.dispatcherTLS(key, d)
}

// dispatcherTLS checks a dispatcher's tls settings: only with an https
// host, the client certificate and its key together. Whether the files can
// be read is checked when the dispatcher is built (package dispatcher).
func (v *validator) dispatcherTLS(key string, d DispatcherConfig) {
	t := d.TLS
	if !t.Enabled() {
		return
	}
	if u, err := url.Parse(d.Host); err == nil && u.Scheme == "http" {
		v.add(invalid(key+".tls", "applies to an https host only; host is %q", d.Host))
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		v.add(invalid(key+".tls.key-file", "must be set when tls.cert-file is set (the client certificate's private key, PEM)"))
	case t.CertFile == "" && t.KeyFile != "":
		v.add(invalid(key+".tls.cert-file", "must be set when tls.key-file is set (the client certificate chain, PEM)"))
	}
}

// checkHost accepts exactly scheme://host:port with scheme http or https.
func checkHost(h string) error {
	if h == "" {
		return errors.New("missing")
	}
	u, err := url.Parse(h)
	if err != nil {
		return fmt.Errorf("got %q", h)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme %q in %q", u.Scheme, h)
	case u.Opaque != "" || u.User != nil:
		return fmt.Errorf("got %q", h)
	case u.Hostname() == "":
		return fmt.Errorf("no address in %q", h)
	case u.Port() == "":
		return fmt.Errorf("no port in %q", h)
	case u.Path != "" || u.RawPath != "":
		return fmt.Errorf("path %q in %q", u.Path, h)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Errorf("query or fragment in %q", h)
	}
	if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q in %q is not 1..65535", u.Port(), h)
	}
	return nil
}

// listenAddr checks an optional TCP listen address: "" (off) or host:port
// with a port of 0..65535.
func (v *validator) listenAddr(key, addr string) {
	if addr == "" {
		return
	}
	if _, port, err := net.SplitHostPort(addr); err != nil {
		v.add(invalid(key, "must be \"\" (off) or host:port; got %q", addr))
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.add(invalid(key, "port must be 0..65535; got %q", port))
	}
}
