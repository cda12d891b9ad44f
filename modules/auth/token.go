package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
)

// TokenPrefix starts every token NewToken makes, so that a leaked one is
// easy to recognise (secret scanners) and to tell from other credentials.
const TokenPrefix = "mmmq_"

// NewToken returns a fresh random token (TokenPrefix and 32 random bytes
// in unpadded base64url) and its lowercase hex SHA-256, the value of a
// token entry's token-sha256.
func NewToken() (token, digest string) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, Digest(token)
}

// Digest is the lowercase hex SHA-256 of token (a token-sha256 value).
func Digest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
