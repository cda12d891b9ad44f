package webhooks

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Signer signs pushes with one or more secrets (v1, HMAC-SHA256) and
// signing keys (v1a, ed25519). It is safe for concurrent use and never
// changes after NewSigner or NewSignerWithKeys.
type Signer struct {
	macs []*keyedMAC
	keys []SigningKey
}

// NewSigner returns a Signer that adds one v1 signature per secret, in the
// order given (during a key rotation: the new secret and the old one). It
// panics if secrets is empty or holds a zero Secret: both are programming
// errors, a Secret comes from ParseSecret.
func NewSigner(secrets ...Secret) *Signer {
	if len(secrets) == 0 {
		panic("webhooks: NewSigner without secrets")
	}
	return NewSignerWithKeys(secrets, nil)
}

// NewSignerWithKeys returns a Signer that adds one v1 signature per secret
// and then one v1a signature per signing key, each list in the order given
// (during a rotation: the new key and the old one). It panics if both are
// empty or one holds a zero Secret or SigningKey (programming errors: they
// come from ParseSecret and ParseSigningKey).
func NewSignerWithKeys(secrets []Secret, keys []SigningKey) *Signer {
	if len(secrets) == 0 && len(keys) == 0 {
		panic("webhooks: NewSignerWithKeys without secrets or keys")
	}
	s := &Signer{macs: make([]*keyedMAC, len(secrets))}
	for i, sec := range secrets {
		s.macs[i] = newKeyedMAC(sec)
	}
	for _, k := range keys {
		if k.IsZero() {
			panic("webhooks: zero SigningKey (get one from ParseSigningKey)")
		}
		s.keys = append(s.keys, k)
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
// "v1,<sig>" per secret, then "v1a,<sig>" per signing key, separated by
// single spaces. A v1 <sig> is the standard base64 (44 characters) of
// HMAC-SHA256(key, id + "." + unix + "." + body), a v1a <sig> the
// standard base64 (88 characters) of the 64-byte ed25519 signature of the
// same text, where unix is ts.Unix() in decimal (the sub-second part of ts
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
	b.Grow(len(s.macs)*(len("v1,")+sigLen+1) + len(s.keys)*(len("v1a,")+edSigLen+1))
	for i, m := range s.macs {
		if i > 0 {
			b.WriteByte(' ')
		}
		m.sum(&mac, id, unix, body)
		base64.StdEncoding.Encode(enc[:], mac[:])
		b.WriteString("v1,")
		b.Write(enc[:])
	}
	if len(s.keys) > 0 {
		var (
			sig    [ed25519.SignatureSize]byte
			edEnc  [edSigLen]byte
			signed = signedText(id, unix, body)
		)
		for i, k := range s.keys {
			if i > 0 || len(s.macs) > 0 {
				b.WriteByte(' ')
			}
			k.sign(&sig, signed)
			base64.StdEncoding.Encode(edEnc[:], sig[:])
			b.WriteString("v1a,")
			b.Write(edEnc[:])
		}
	}
	return b.String()
}

// edSigLen is the length of the standard base64 of an ed25519 signature.
const edSigLen = (ed25519.SignatureSize + 2) / 3 * 4

// signedText returns id + "." + unix + "." + body, the text both schemes
// sign.
func signedText(id string, unix int64, body []byte) []byte {
	out := make([]byte, 0, len(id)+21+len(body))
	out = append(out, id...)
	out = append(out, '.')
	out = strconv.AppendInt(out, unix, 10)
	out = append(out, '.')
	return append(out, body...)
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

// KeyIDs returns the KeyID of each signing key, in signing order, for logs.
func (s *Signer) KeyIDs() []string {
	out := make([]string, len(s.keys))
	for i, k := range s.keys {
		out[i] = k.KeyID()
	}
	return out
}

func fingerprints(macs []*keyedMAC) []string {
	out := make([]string, len(macs))
	for i, m := range macs {
		out[i] = m.secret.Fingerprint()
	}
	return out
}
