package webhooks

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Signer signs pushes with one or more secrets. It is safe for concurrent
// use and never changes after NewSigner.
type Signer struct {
	macs []*keyedMAC
}

// NewSigner returns a Signer that adds one v1 signature per secret, in the
// order given (during a key rotation: the new secret and the old one). It
// panics if secrets is empty or holds a zero Secret: both are programming
// errors, a Secret comes from ParseSecret.
func NewSigner(secrets ...Secret) *Signer {
	if len(secrets) == 0 {
		panic("webhooks: NewSigner without secrets")
	}
	s := &Signer{macs: make([]*keyedMAC, len(secrets))}
	for i, sec := range secrets {
		s.macs[i] = newKeyedMAC(sec)
	}
	return s
}

// ParseSigner parses each serialized secret with ParseSecret and returns
// their Signer. No secret at all, or a refused one, is an error wrapping
// ErrInvalidSecret that gives the secret's position (1-based) but never its
// text.
func ParseSigner(secrets ...string) (*Signer, error) {
	parsed, err := parseSecrets(secrets)
	if err != nil {
		return nil, err
	}
	return NewSigner(parsed...), nil
}

// parseSecrets parses serialized secrets for ParseSigner and callers that
// build a Verifier the same way.
func parseSecrets(secrets []string) ([]Secret, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%w: no secret given", ErrInvalidSecret)
	}
	out := make([]Secret, len(secrets))
	for i, s := range secrets {
		sec, err := ParseSecret(s)
		if err != nil {
			return nil, fmt.Errorf("secret %d of %d: %w", i+1, len(secrets), err)
		}
		out[i] = sec
	}
	return out, nil
}

// Sign returns the webhook-signature header value for one attempt:
// "v1,<sig>" per secret, separated by single spaces, where <sig> is the
// standard base64 (44 characters) of HMAC-SHA256(key, id + "." + unix +
// "." + body) and unix is ts.Unix() in decimal (the sub-second part of ts
// is dropped, as in the webhook-timestamp header). body is signed byte for
// byte, exactly as it will be sent.
//
// id should be the message's id, the same on every attempt, non-empty and
// without "." (a "." would let the same signed text be split into another
// id, timestamp and body); it must not be chosen by an untrusted party.
// Sign does not check it.
func (s *Signer) Sign(id string, ts time.Time, body []byte) string {
	var (
		mac [macSize]byte
		enc [sigLen]byte
		b   strings.Builder
	)
	unix := ts.Unix()
	b.Grow(len(s.macs)*(len("v1,")+sigLen+1) - 1)
	for i, m := range s.macs {
		if i > 0 {
			b.WriteByte(' ')
		}
		m.sum(&mac, id, unix, body)
		base64.StdEncoding.Encode(enc[:], mac[:])
		b.WriteString("v1,")
		b.Write(enc[:])
	}
	return b.String()
}

// SetHeaders sets webhook-id (id), webhook-timestamp (ts.Unix() in decimal)
// and webhook-signature (Sign) in h, one value each, under the exact
// lower-case keys HeaderID, HeaderTimestamp and HeaderSignature (raw map
// keys, not canonicalised by http.Header.Set), so they are sent in lower
// case. Any values under the canonical keys (Webhook-Id, ...) are removed
// first, so no second copy goes out. See Sign for what id should be.
func (s *Signer) SetHeaders(h http.Header, id string, ts time.Time, body []byte) {
	for _, name := range [...]string{HeaderID, HeaderTimestamp, HeaderSignature} {
		delete(h, http.CanonicalHeaderKey(name))
	}
	h[HeaderID] = []string{id}
	h[HeaderTimestamp] = []string{strconv.FormatInt(ts.Unix(), 10)}
	h[HeaderSignature] = []string{s.Sign(id, ts, body)}
}

// Fingerprints returns the Fingerprint of each secret, in signing order,
// for logs.
func (s *Signer) Fingerprints() []string { return fingerprints(s.macs) }

func fingerprints(macs []*keyedMAC) []string {
	out := make([]string, len(macs))
	for i, m := range macs {
		out[i] = m.secret.Fingerprint()
	}
	return out
}
