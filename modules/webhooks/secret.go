package webhooks

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
)

// SecretPrefix starts every serialized secret: "whsec_" followed by the key
// in standard base64 (RFC 4648 section 4, with padding).
const SecretPrefix = "whsec_"

// Key sizes in bytes allowed by ParseSecret: the Standard Webhooks
// specification asks for 24 to 64 bytes (192 to 512 bits) of random data.
// NewSecret makes keys of NewSecretSize bytes.
const (
	MinKeySize    = 24
	MaxKeySize    = 64
	NewSecretSize = 32
)

// Secret is one HMAC-SHA256 signing key. The zero Secret holds no key and is
// refused by NewSigner and NewVerifier; get one from ParseSecret.
//
// A Secret never prints its key: every fmt verb (%v, %+v, %#v, %s, %q, %x,
// ...) shows "whsec_…(redacted, fingerprint 1a2b3c4d)". The key sits behind
// a pointer, so a struct that holds a Secret in an unexported field prints
// an address there, not the key. Copies share the key, which is never
// modified. A Secret is safe for concurrent use.
type Secret struct {
	k *key
}

type key struct {
	b           []byte
	fingerprint string
}

// ParseSecret parses a serialized secret, "whsec_" + the standard base64
// (padded) encoding of a 24 to 64 byte key, as NewSecret and Standard
// Webhooks senders such as Svix produce it. Nothing is trimmed: spaces and
// line breaks are refused. Every error wraps ErrInvalidSecret and says what
// is wrong (no prefix, not base64 and at which character, or the key length
// in bytes) but never contains any of the text after the prefix.
func ParseSecret(s string) (Secret, error) {
	b, err := decodeKey(s, SecretPrefix, ErrInvalidSecret)
	if err != nil {
		return Secret{}, err
	}
	switch {
	case len(b) == 0:
		return Secret{}, fmt.Errorf("%w: empty key", ErrInvalidSecret)
	case len(b) < MinKeySize:
		return Secret{}, fmt.Errorf("%w: key is %d bytes, want %d to %d", ErrInvalidSecret, len(b), MinKeySize, MaxKeySize)
	case len(b) > MaxKeySize:
		return Secret{}, fmt.Errorf("%w: key is %d bytes, want %d to %d", ErrInvalidSecret, len(b), MinKeySize, MaxKeySize)
	}
	sum := sha256.Sum256(b)
	return Secret{k: &key{b: b, fingerprint: hex.EncodeToString(sum[:4])}}, nil
}

// NewSecret returns a fresh serialized secret: "whsec_" + the standard
// base64 encoding of NewSecretSize (32) bytes from crypto/rand, 50
// characters in all. ParseSecret accepts it.
func NewSecret() (string, error) {
	b := make([]byte, NewSecretSize)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("webhooks: new secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// Fingerprint returns the first 8 hex digits (4 bytes) of the SHA-256 of the
// key, to tell secrets apart in logs and configuration checks without
// showing them; "" for the zero Secret.
func (s Secret) Fingerprint() string {
	if s.k == nil {
		return ""
	}
	return s.k.fingerprint
}

// IsZero reports whether s is the zero Secret (holds no key).
func (s Secret) IsZero() bool { return s.k == nil }

// String returns "whsec_…(redacted, fingerprint 1a2b3c4d)", or
// "whsec_…(none)" for the zero Secret; never the key.
func (s Secret) String() string {
	if s.k == nil {
		return SecretPrefix + "…(none)"
	}
	return SecretPrefix + "…(redacted, fingerprint " + s.k.fingerprint + ")"
}

// GoString returns the same text as String, for %#v.
func (s Secret) GoString() string { return s.String() }

// Format writes String for every verb and flag, so that no verb (%x, %q,
// %+v, ...) formats the key.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }
