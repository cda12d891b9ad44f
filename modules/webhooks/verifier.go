package webhooks

import (
	"crypto/ed25519"
	"crypto/hmac"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Verifier checks the signature headers of received pushes. It is safe for
// concurrent use once Now is set.
type Verifier struct {
	// Now is the clock webhook-timestamp is compared with; nil means
	// time.Now. Tests set it; set it before the first Verify.
	Now func() time.Time

	tolerance time.Duration
	macs      []*keyedMAC
	pubs      []PublicKey
}

// NewVerifier returns a Verifier that accepts a request signed with any of
// secrets (during a key rotation: the old one and the new one) whose
// webhook-timestamp is at most tolerance before or after its clock;
// tolerance 0 means DefaultTolerance (5 minutes). It panics if tolerance is
// negative, or if secrets is empty or holds a zero Secret: programming
// errors, a Secret comes from ParseSecret.
func NewVerifier(tolerance time.Duration, secrets ...Secret) *Verifier {
	tolerance = checkTolerance(tolerance)
	if len(secrets) == 0 {
		panic("webhooks: NewVerifier without secrets")
	}
	v := &Verifier{tolerance: tolerance, macs: make([]*keyedMAC, len(secrets))}
	for i, sec := range secrets {
		v.macs[i] = newKeyedMAC(sec)
	}
	return v
}

// NewPublicKeyVerifier returns a Verifier that accepts a request with a
// "v1a" (ed25519) signature by any of keys (the whpk_ keys the broker
// lists at /.well-known/mmmq/webhook-keys; during a rotation the old one
// and the new one) and a webhook-timestamp within tolerance, as
// NewVerifier. It panics if tolerance is negative or keys is empty or
// holds a zero PublicKey.
func NewPublicKeyVerifier(tolerance time.Duration, keys ...PublicKey) *Verifier {
	if len(keys) == 0 {
		panic("webhooks: NewPublicKeyVerifier without keys")
	}
	for _, k := range keys {
		if k.IsZero() {
			panic("webhooks: zero PublicKey (get one from ParsePublicKey)")
		}
	}
	return &Verifier{tolerance: checkTolerance(tolerance), pubs: slices.Clone(keys)}
}

// checkTolerance is NewVerifier's rule: negative panics, 0 is the default.
func checkTolerance(tolerance time.Duration) time.Duration {
	switch {
	case tolerance < 0:
		panic("webhooks: a Verifier with a negative tolerance")
	case tolerance == 0:
		return DefaultTolerance
	}
	return tolerance
}

// Tolerance returns the accepted difference between webhook-timestamp and
// the clock, either way.
func (v *Verifier) Tolerance() time.Duration { return v.tolerance }

// Fingerprints returns the Fingerprint of each secret, in the order given
// to NewVerifier, for logs (none for a NewPublicKeyVerifier).
func (v *Verifier) Fingerprints() []string { return fingerprints(v.macs) }

// Verify checks a received request's headers and its body, which must be
// the exact bytes received (not JSON decoded and encoded again). Header
// names are matched in any case: http.Header from a net/http server holds
// Webhook-Id, a hand-built one may hold webhook-id; of several values of
// webhook-id or webhook-timestamp the first is used, the entries of all
// webhook-signature values are tried.
//
// It returns nil when webhook-timestamp is within the tolerance of the clock
// (Now, else time.Now; compared in whole seconds) and one "v1,<base64>" entry of webhook-signature (space-separated) is the
// HMAC-SHA256 of webhook-id + "." + timestamp + "." + body under one of the
// secrets, or (a Verifier from NewPublicKeyVerifier) one "v1a,<base64>"
// entry is a valid ed25519 signature of that text by one of the public
// keys; entries of other versions ("v2,", and v1a for a secret Verifier, v1
// for a key Verifier) and malformed ones are skipped. HMACs are compared in
// constant time. Otherwise it returns
// an error wrapping, checked in this order, ErrMissingHeaders,
// ErrInvalidTimestamp, ErrTimestampTooOld, ErrTimestampTooNew or
// ErrNoMatchingSignature. Error texts hold no secret and no signature and
// can be sent back to the client.
//
// Verify does not remember ids: a request replayed within the tolerance
// passes again. Drop duplicates by webhook-id where that matters.
func (v *Verifier) Verify(h http.Header, body []byte) error {
	id, idOK := first(h, HeaderID)
	tsText, tsOK := first(h, HeaderTimestamp)
	sigs := values(h, HeaderSignature)
	sigOK := false
	for _, s := range sigs {
		if strings.TrimSpace(s) != "" {
			sigOK = true
			break
		}
	}
	if !idOK || !tsOK || !sigOK {
		var missing []string
		for _, m := range []struct {
			ok   bool
			name string
		}{{idOK, HeaderID}, {tsOK, HeaderTimestamp}, {sigOK, HeaderSignature}} {
			if !m.ok {
				missing = append(missing, m.name)
			}
		}
		return fmt.Errorf("%w: %s", ErrMissingHeaders, strings.Join(missing, ", "))
	}

	unix, ok := parseUnix(tsText)
	if !ok {
		return fmt.Errorf("%w: %s %.40q is not decimal Unix seconds", ErrInvalidTimestamp, HeaderTimestamp, tsText)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	// Whole seconds on both sides: the header has no finer resolution.
	sent := time.Unix(unix, 0)
	switch age := time.Unix(now().Unix(), 0).Sub(sent); {
	case age > v.tolerance:
		return fmt.Errorf("%w: sent at %s, %s before this clock (tolerance %s)",
			ErrTimestampTooOld, sent.UTC().Format(time.RFC3339), age, v.tolerance)
	case age < -v.tolerance:
		return fmt.Errorf("%w: sent at %s, %s after this clock (tolerance %s)",
			ErrTimestampTooNew, sent.UTC().Format(time.RFC3339), -age, v.tolerance)
	}

	want := make([][macSize]byte, len(v.macs))
	for i, m := range v.macs {
		m.sum(&want[i], id, unix, body)
	}
	var (
		got            [sigLen / 4 * 3]byte // Decode may write this much for sigLen characters
		edGot          [edSigLen / 4 * 3]byte
		signed         []byte
		entries, known int
	)
	for _, s := range sigs {
		for _, e := range strings.Fields(s) {
			entries++
			version, sig, ok := strings.Cut(e, ",")
			switch {
			case !ok:
			case version == "v1" && len(v.macs) > 0:
				known++
				if len(sig) != sigLen {
					continue
				}
				if n, err := base64.StdEncoding.Decode(got[:], []byte(sig)); err != nil || n != macSize {
					continue
				}
				for i := range want {
					if hmac.Equal(got[:macSize], want[i][:]) {
						return nil
					}
				}
			case version == "v1a" && len(v.pubs) > 0:
				known++
				if len(sig) != edSigLen {
					continue
				}
				if n, err := base64.StdEncoding.Decode(edGot[:], []byte(sig)); err != nil || n != ed25519.SignatureSize {
					continue
				}
				if signed == nil {
					signed = signedText(id, unix, body)
				}
				for _, p := range v.pubs {
					if ed25519.Verify(p.b, signed, edGot[:ed25519.SignatureSize]) {
						return nil
					}
				}
			}
		}
	}
	scheme, n := "v1", len(v.macs)
	what := "secret(s)"
	if len(v.pubs) > 0 {
		scheme, n, what = "v1a", len(v.pubs), "public key(s)"
	}
	return fmt.Errorf("%w: checked the %d %s entries of %d in %s against %d %s for this id, timestamp and body",
		ErrNoMatchingSignature, known, scheme, entries, HeaderSignature, n, what)
}

// parseUnix parses decimal Unix seconds: 1 to 18 ASCII digits, no sign, no
// spaces (18 digits reach far past any real clock and never overflow).
func parseUnix(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// values returns the values of the header name (lower case) under any case
// of its key: the canonical key first, then the lower-case key, then any
// other spelling.
func values(h http.Header, name string) []string {
	canon := http.CanonicalHeaderKey(name)
	var out []string
	out = append(out, h[canon]...)
	if name != canon {
		out = append(out, h[name]...)
	}
	for k, vs := range h {
		if k != canon && k != name && strings.EqualFold(k, name) {
			out = append(out, vs...)
		}
	}
	return out
}

// first returns the first value of the header name under any case, and
// whether it is present and not blank.
func first(h http.Header, name string) (string, bool) {
	vs := values(h, name)
	if len(vs) == 0 || strings.TrimSpace(vs[0]) == "" {
		return "", false
	}
	return vs[0], true
}
