package webhooks

import (
	"errors"
	"time"
)

// The three Standard Webhooks headers, in the lower case they are sent in.
// SetHeaders stores them under these exact keys; Verifier.Verify finds them
// under any case (net/http canonicalises received names to Webhook-Id, ...).
const (
	// HeaderID carries the message id: the same on every attempt of one
	// message, so a consumer can drop duplicates by it.
	HeaderID = "webhook-id"
	// HeaderTimestamp carries the time of this attempt in decimal Unix
	// seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature carries one "v1,<base64 HMAC-SHA256>" entry per
	// signing secret and one "v1a,<base64 ed25519 signature>" per signing
	// key, separated by single spaces.
	HeaderSignature = "webhook-signature"
)

// DefaultTolerance is the largest difference, either way, between a
// request's webhook-timestamp and the verifier's clock that
// NewVerifier(0, ...) accepts: the 5 minutes the Standard Webhooks
// reference libraries use.
const DefaultTolerance = 5 * time.Minute

// Errors. Verify's errors wrap one of the first five (test with errors.Is)
// and add details; ParseSecret's and ParseSigner's wrap ErrInvalidSecret.
var (
	// ErrMissingHeaders: webhook-id, webhook-timestamp or webhook-signature
	// is absent or empty (the error names which).
	ErrMissingHeaders = errors.New("webhooks: missing headers")
	// ErrInvalidTimestamp: webhook-timestamp is not decimal Unix seconds.
	ErrInvalidTimestamp = errors.New("webhooks: invalid timestamp")
	// ErrTimestampTooOld: webhook-timestamp is more than the tolerance
	// before the verifier's clock (a replay, a slow network or clock skew).
	ErrTimestampTooOld = errors.New("webhooks: timestamp too old")
	// ErrTimestampTooNew: webhook-timestamp is more than the tolerance after
	// the verifier's clock (clock skew).
	ErrTimestampTooNew = errors.New("webhooks: timestamp too new")
	// ErrNoMatchingSignature: no v1 entry of webhook-signature is the
	// HMAC of this id, timestamp and body under any of the verifier's
	// secrets, or (a NewPublicKeyVerifier) no v1a entry is an ed25519
	// signature of them by any of its public keys (a wrong or rotated-out
	// secret or key, or a changed id, timestamp or body).
	ErrNoMatchingSignature = errors.New("webhooks: no matching signature")
	// ErrInvalidSecret: a serialized secret is refused by ParseSecret.
	ErrInvalidSecret = errors.New("webhooks: invalid secret")
	// ErrInvalidKey: a serialized signing or public key is refused by
	// ParseSigningKey or ParsePublicKey.
	ErrInvalidKey = errors.New("webhooks: invalid key")
)
