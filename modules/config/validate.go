package config

import (
	"errors"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
)

// Validate checks every value, the sections held included (with their own
// validation and cross checks; a section not held is at its defaults),
// and returns all problems joined with errors.Join, each a [*KeyError]
// naming its key and what is allowed. Only the first cause is reported: a
// key whose bound comes from an invalid key (a section's cross check sees
// it with [View.Failed]) is then checked against its own limits only (a
// dispatcher's path inherited from an invalid mmmq.broker.dispatch.path is
// not reported again). It expects a normalized Config (see
// [Config.Normalize]).
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

	// The sections' own checks first and their cross checks last, when
	// every other problem is known (a dispatcher's inherited path already
	// reported under mmmq.broker.dispatch is not reported again); their
	// problems are listed after the core keys'.
	secErrs := c.validateSections(&v)

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

func (v *validator) path(key, p string) {
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?# ") {
		v.add(invalid(key, "must start with \"/\" and hold no query, fragment or spaces; got %q", p))
	}
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
