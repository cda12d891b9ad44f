package webhooks

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The prefixes of the asymmetric (v1a, ed25519) keys of the Standard
// Webhooks specification: "whsk_" + the standard base64 (padded) of a
// private key, "whpk_" + the standard base64 of its 32-byte public key.
const (
	SigningKeyPrefix = "whsk_"
	PublicKeyPrefix  = "whpk_"
)

// KeyIDLen is the length of a KeyID in hex digits (8 bytes of SHA-256).
const KeyIDLen = 16

// SigningKey is one ed25519 private key that signs pushes with "v1a"
// entries. The zero SigningKey holds no key; get one from
// ParseSigningKey.
//
// Like Secret, a SigningKey never prints its private part: every fmt verb
// shows "whsk_…(redacted, kid 0123456789abcdef)", where the kid is the
// KeyID of its public key (which is public). The key sits behind a
// pointer; copies share it. Safe for concurrent use.
type SigningKey struct {
	k *edKey
}

type edKey struct {
	priv ed25519.PrivateKey
	pub  PublicKey
}

// PublicKey is one ed25519 public key, the half of a SigningKey a consumer
// verifies v1a signatures with. It prints as "whpk_<base64>" (String);
// the zero PublicKey holds no key.
type PublicKey struct {
	b   []byte // 32 bytes; never modified
	kid string
}

// ParseSigningKey parses "whsk_" + the standard base64 (padded) of an
// ed25519 private key: its 32-byte seed (what the specification's
// reference libraries read and NewSigningKey writes) or the 64-byte form
// seed || public key (Go's ed25519.PrivateKey, libsodium's secret key),
// whose public half must be the one the seed derives. Nothing is trimmed.
// Every error wraps ErrInvalidKey and says what is wrong but never
// contains any of the text after the prefix.
func ParseSigningKey(s string) (SigningKey, error) {
	b, err := decodeKey(s, SigningKeyPrefix, ErrInvalidKey)
	if err != nil {
		return SigningKey{}, err
	}
	var priv ed25519.PrivateKey
	switch len(b) {
	case ed25519.SeedSize:
		priv = ed25519.NewKeyFromSeed(b)
	case ed25519.PrivateKeySize:
		priv = ed25519.NewKeyFromSeed(b[:ed25519.SeedSize])
		if subtle.ConstantTimeCompare(priv[ed25519.SeedSize:], b[ed25519.SeedSize:]) != 1 {
			return SigningKey{}, fmt.Errorf("%w: the 64-byte key's second half is not the public key of its first half (the seed)", ErrInvalidKey)
		}
	default:
		return SigningKey{}, fmt.Errorf("%w: key is %d bytes, want %d (an ed25519 seed) or %d (seed and public key)",
			ErrInvalidKey, len(b), ed25519.SeedSize, ed25519.PrivateKeySize)
	}
	return SigningKey{k: &edKey{priv: priv, pub: newPublicKey(priv.Public().(ed25519.PublicKey))}}, nil
}

// ParsePublicKey parses "whpk_" + the standard base64 (padded) of a
// 32-byte ed25519 public key. Errors wrap ErrInvalidKey.
func ParsePublicKey(s string) (PublicKey, error) {
	b, err := decodeKey(s, PublicKeyPrefix, ErrInvalidKey)
	if err != nil {
		return PublicKey{}, err
	}
	if len(b) != ed25519.PublicKeySize {
		return PublicKey{}, fmt.Errorf("%w: public key is %d bytes, want %d", ErrInvalidKey, len(b), ed25519.PublicKeySize)
	}
	return newPublicKey(b), nil
}

// NewSigningKey returns a fresh serialized signing key: "whsk_" + the
// standard base64 of a 32-byte seed from crypto/rand (49 characters).
func NewSigningKey() (string, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return "", fmt.Errorf("webhooks: new signing key: %w", err)
	}
	return SigningKeyPrefix + base64.StdEncoding.EncodeToString(seed), nil
}

// decodeKey checks prefix and decodes the standard base64 after it, for
// every serialized key and secret; its errors wrap errInvalid and never
// quote the input.
func decodeKey(s, prefix string, errInvalid error) ([]byte, error) {
	enc, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return nil, fmt.Errorf("%w: does not start with %q", errInvalid, prefix)
	}
	if enc == "" {
		return nil, fmt.Errorf("%w: empty key after %q", errInvalid, prefix)
	}
	if i := strings.IndexAny(enc, "\r\n"); i >= 0 {
		return nil, fmt.Errorf("%w: key contains a line break at character %d after %q", errInvalid, i, prefix)
	}
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		var ce base64.CorruptInputError
		if errors.As(err, &ce) {
			return nil, fmt.Errorf("%w: key is not standard base64 with padding (A-Z a-z 0-9 + / =): bad or incomplete group of 4 characters at character %d after %q",
				errInvalid, int64(ce), prefix)
		}
		return nil, fmt.Errorf("%w: key is not standard base64 with padding", errInvalid)
	}
	return b, nil
}

func newPublicKey(b []byte) PublicKey {
	sum := sha256.Sum256(b)
	return PublicKey{b: append([]byte(nil), b...), kid: hex.EncodeToString(sum[:KeyIDLen/2])}
}

// IsZero reports whether k holds no key.
func (k SigningKey) IsZero() bool { return k.k == nil }

// Public returns k's public key (the zero PublicKey for the zero k).
func (k SigningKey) Public() PublicKey {
	if k.k == nil {
		return PublicKey{}
	}
	return k.k.pub
}

// KeyID returns the KeyID of k's public key; "" for the zero k.
func (k SigningKey) KeyID() string { return k.Public().KeyID() }

// String returns "whsk_…(redacted, kid <KeyID>)", or "whsk_…(none)" for
// the zero SigningKey; never the private key.
func (k SigningKey) String() string {
	if k.k == nil {
		return SigningKeyPrefix + "…(none)"
	}
	return SigningKeyPrefix + "…(redacted, kid " + k.k.pub.kid + ")"
}

// GoString returns the same text as String, for %#v.
func (k SigningKey) GoString() string { return k.String() }

// Format writes String for every verb and flag.
func (k SigningKey) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, k.String()) }

// sign writes the ed25519 signature of signed (id + "." + unix + "." +
// body) to dst.
func (k SigningKey) sign(dst *[ed25519.SignatureSize]byte, signed []byte) {
	copy(dst[:], ed25519.Sign(k.k.priv, signed))
}

// IsZero reports whether p holds no key.
func (p PublicKey) IsZero() bool { return p.b == nil }

// KeyID returns a stable id of p: the first 16 hex digits (8 bytes) of
// the SHA-256 of its 32 raw bytes, in lower case; "" for the zero p. The
// same public key always has the same KeyID, on every broker.
func (p PublicKey) KeyID() string { return p.kid }

// Ed25519 returns a copy of the raw 32-byte key, for crypto/ed25519.
func (p PublicKey) Ed25519() ed25519.PublicKey { return append(ed25519.PublicKey(nil), p.b...) }

// String returns "whpk_" + the standard base64 of the key ("" for the
// zero p): the form ParsePublicKey reads and consumers are given.
func (p PublicKey) String() string {
	if p.b == nil {
		return ""
	}
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(p.b)
}
