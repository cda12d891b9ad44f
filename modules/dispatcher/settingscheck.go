package dispatcher

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
)

// Validate checks s as data, without reading its TLS files: the rules a
// dispatcher's settings must meet wherever they come from (a YAML entry,
// the admin API, dispatchers.json). key names the entry in the errors,
// e.g. "mmmq.broker.dispatchers[0]"; each problem is a *config.KeyError
// for key + "." + the field ("mmmq.broker.dispatchers[0].host: must be
// scheme://address:port ..."), all of them joined with errors.Join. Zero
// fields are allowed (they take their defaults, see WithDefaults).
// FromSettings checks the rest when it builds the dispatcher (the TLS
// files).
func (s Settings) Validate(key string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, config.InvalidValue(key+"."+field, format, args...))
	}
	if s.Name == "" {
		bad("name", `is required: 1-200 characters of [A-Za-z0-9_.-], not starting with "." (it names the checkpoint files)`)
	} else if contract.ValidCheckpointName(s.Name) != nil {
		bad("name", `must be 1-200 characters of [A-Za-z0-9_.-], not starting with "." (it names the checkpoint files); got %q`, s.Name)
	}
	if err := checkHostURL(s.Host); err != nil {
		bad("host", `must be scheme://address:port with scheme http or https and no path, query or fragment (e.g. "http://localhost:8081"): %v`, err)
	}
	if len(s.Patterns) == 0 {
		bad("patterns", "must list at least one topic pattern")
	}
	for j, p := range s.Patterns {
		switch err := contract.ValidatePattern(p); {
		case strings.TrimSpace(p) == "":
			bad(fmt.Sprintf("patterns[%d]", j), "must not be empty")
		case err != nil:
			bad(fmt.Sprintf("patterns[%d]", j), "%v", err)
		}
	}
	if s.Path != "" {
		if err := config.CheckPath(key+".path", s.Path); err != nil {
			errs = append(errs, err)
		}
	}
	if s.Timeout < 0 {
		bad("timeout", `must be a duration >= 0 such as "30s" (0 or absent: mmmq.broker.dispatch.timeout); got %s`, s.Timeout)
	}
	if s.Start != "" && s.Start != StartEarliest && s.Start != StartLatest {
		bad("start", "must be %q or %q; got %q", StartEarliest, StartLatest, s.Start)
	}
	switch s.Commit.Policy {
	case "", EveryMessage, Interval:
	default:
		bad("commit.policy", "must be %q or %q; got %q", EveryMessage, Interval, s.Commit.Policy)
	}
	if s.Commit.Interval < 0 {
		bad("commit.interval", `must be a duration > 0 such as "1s"; got %s`, s.Commit.Interval)
	}
	if s.Commit.MaxCount < 0 {
		bad("commit.max-count", "must be at least 1; got %d", s.Commit.MaxCount)
	}
	errs = append(errs, s.validateTLS(key)...)
	return errors.Join(append(errs, s.validateDelivery(key)...)...)
}

// validateDelivery checks the signing secrets and keys and the delivery settings
// with the rules Dispatcher.Validate applies (one rule set), each problem
// named under key.
func (s Settings) validateDelivery(key string) []error {
	var errs []error
	sg, perrs := s.signing()
	for _, e := range perrs {
		errs = append(errs, config.InvalidValue(key+"."+e.field, "%v", e.err))
	}
	d := s.apply(New(s.Name, Host{}), sg)
	for _, err := range d.validateDelivery() {
		var p fieldProblem
		if errors.As(err, &p) {
			errs = append(errs, config.InvalidValue(key+"."+p.field, "%s", p.problem))
		}
	}
	return errs
}

// validateTLS checks the tls entry: only with an https host, the client
// certificate and its key together. Whether the files can be read is
// checked when the dispatcher is built.
func (s Settings) validateTLS(key string) []error {
	t := s.TLS
	if t.IsZero() {
		return nil
	}
	var errs []error
	if u, err := url.Parse(s.Host); err == nil && u.Scheme == "http" {
		errs = append(errs, config.InvalidValue(key+".tls", "applies to an https host only; host is %q", s.Host))
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		errs = append(errs, config.InvalidValue(key+".tls.key-file", "must be set when tls.cert-file is set (the client certificate's private key, PEM)"))
	case t.CertFile == "" && t.KeyFile != "":
		errs = append(errs, config.InvalidValue(key+".tls.cert-file", "must be set when tls.key-file is set (the client certificate chain, PEM)"))
	}
	return errs
}

// checkHostURL is ParseHost's rule (the one the Go API uses) plus what the
// data forms add: exactly scheme://address:port, nothing after it, not even
// the "/" ParseHost tolerates.
func checkHostURL(h string) error {
	if h == "" {
		return errors.New("missing")
	}
	if _, err := ParseHost(h); err != nil {
		return err
	}
	if strings.HasSuffix(h, "/") {
		return fmt.Errorf("path \"/\" in %q", h)
	}
	return nil
}
