package contract

import (
	"context"
	"fmt"
	"time"
)

// Action is what a request does, for permissions (mmmq.auth.tokens[].
// permissions[].actions). Wire format, do not change.
type Action string

const (
	// ActionPublish: POST /messages (single and batch), line protocol PUB
	// and PUBID.
	ActionPublish Action = "publish"
	// ActionConsume: consumer-group fetch, ack, release and seek, and the
	// group listing of a topic.
	ActionConsume Action = "consume"
	// ActionRead: reading messages back and GET /topics (the listing shows
	// only the topics the principal may read).
	ActionRead Action = "read"
	// ActionAdmin: dispatchers (/mmmq/dispatchers...), topic deletion and
	// reopen.
	ActionAdmin Action = "admin"
	// ActionMetrics: GET /metrics (unless mmmq.auth.protect-metrics is false).
	ActionMetrics Action = "metrics"
)

// Actions lists every Action, in documentation order.
var Actions = []Action{ActionPublish, ActionConsume, ActionRead, ActionAdmin, ActionMetrics}

// Principal is who made a request: a token entry of mmmq.auth.tokens,
// found by its bearer token or by its client certificate's common name.
// Implementations are immutable and safe for concurrent use.
type Principal interface {
	// Name is the entry's name (audit logs, error texts); never a secret.
	Name() string
	// Can reports whether the principal may do action on topic ("" for an
	// action without a topic, such as listing dispatchers or metrics) and,
	// for ActionConsume, as group ("" when none applies).
	Can(action Action, topic, group string) bool
	// Limits are the principal's own limits (zero fields: none).
	Limits() Limits
}

// Limits are one principal's limits (a token entry's
// max-concurrent-requests, max-connections, publish-rate and
// publish-burst); 0 means no limit.
type Limits struct {
	// MaxConcurrentRequests caps the principal's HTTP requests in progress.
	MaxConcurrentRequests int
	// MaxConnections caps the principal's line-protocol connections.
	MaxConnections int
	// PublishRate is messages per second (a token bucket), over HTTP and
	// the line protocol together; PublishBurst is the bucket's size
	// (0: max(1, PublishRate)).
	PublishRate  float64
	PublishBurst int
}

// Limiter enforces Limits per principal (by name). The auth module
// provides it; without auth there is no principal and nothing is limited.
type Limiter interface {
	// Acquire takes one slot of p's MaxConcurrentRequests (kind
	// "request") or MaxConnections (kind "connection"); release gives it
	// back. A full principal gets a *RateLimitedError.
	Acquire(p Principal, kind string) (release func(), err error)
	// Publish takes n messages from p's publish bucket, all or none; a
	// refusal is a *RateLimitedError saying when n would fit.
	Publish(p Principal, n int) error
}

// RateLimitedError is a request over a principal's limit (HTTP 429
// RATE_LIMITED with Retry-After: RetryAfter rounded up to whole seconds;
// line protocol ERR RATE_LIMITED).
type RateLimitedError struct {
	Principal  string
	What       string        // "concurrent requests", "connections", "publish rate"
	RetryAfter time.Duration // at least 1 s on the wire
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limited: %q is over its %s limit; retry after %s", e.Principal, e.What, e.RetryAfter.Round(time.Millisecond))
}

// Unwrap returns ErrRateLimited (429 for Classify).
func (e *RateLimitedError) Unwrap() error { return ErrRateLimited }

// Authenticator finds the Principal of a bearer token. The auth module
// provides it; with no tokens configured Enabled is false and every
// request is let through unauthenticated, as before auth existed.
type Authenticator interface {
	// Enabled reports whether authentication is on (at least one token
	// entry). It may change on a reload.
	Enabled() bool
	// Authenticate returns the principal of token (compared in constant
	// time against stored SHA-256 digests) or ErrUnauthorized.
	Authenticate(token string) (Principal, error)
	// AuthenticateCert returns the principal of a verified client
	// certificate's subject common name (a token entry with client-cn) or
	// ErrUnauthorized.
	AuthenticateCert(commonName string) (Principal, error)
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p (set by the HTTP server and the
// line protocol once a request is authenticated).
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal ctx carries, if any.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// Errors of authentication and authorization.
var (
	// ErrUnauthorized: no credentials, or unknown ones (HTTP 401 with
	// WWW-Authenticate: Bearer; line protocol ERR UNAUTHORIZED).
	ErrUnauthorized = NewError(CodeUnauthorized, "authentication required: send Authorization: Bearer <token>")
	// ErrForbidden is what every *ForbiddenError wraps (HTTP 403).
	ErrForbidden = NewError(CodeForbidden, "forbidden")
	// ErrRateLimited: a per-principal limit was reached (HTTP 429
	// RATE_LIMITED with Retry-After; line protocol ERR RATE_LIMITED).
	ErrRateLimited = NewError(CodeRateLimited, "rate limited")
)

// ForbiddenError is a request the principal may not make (HTTP 403
// FORBIDDEN; line protocol ERR FORBIDDEN <action> <topic>).
type ForbiddenError struct {
	Principal string
	Action    Action
	Topic     string // "" when the action has none
	Group     string // "" when none applies
}

// Error says who was refused what, e.g. `token "billing" may not publish
// to topic "order.new"`.
func (e *ForbiddenError) Error() string {
	what := string(e.Action)
	switch e.Action {
	case ActionAdmin:
		what = "administer"
	case ActionMetrics:
		what = "read metrics"
	}
	if e.Topic != "" {
		what += fmt.Sprintf(" on topic %q", e.Topic)
	}
	if e.Group != "" {
		what += fmt.Sprintf(" as group %q", e.Group)
	}
	return fmt.Sprintf("forbidden: %q may not %s", e.Principal, what)
}

// Unwrap returns ErrForbidden (403 FORBIDDEN for Classify).
func (e *ForbiddenError) Unwrap() error { return ErrForbidden }

// Authorize reports whether the principal ctx carries may do action on
// topic (and group): nil when it may, or when ctx carries no principal
// (authentication is off, or the caller is the broker itself), else a
// *ForbiddenError.
func Authorize(ctx context.Context, action Action, topic, group string) error {
	p, ok := PrincipalFrom(ctx)
	if !ok || p.Can(action, topic, group) {
		return nil
	}
	return &ForbiddenError{Principal: p.Name(), Action: action, Topic: topic, Group: group}
}
