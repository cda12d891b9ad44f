package contract

import (
	"context"
	"net/http"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Audit sampling: per message and level, the first AuditBurst lines of
// each second are written, then one in AuditThereafter. A flood of
// refused requests (every 401 is an audit line) then costs a bounded log
// volume instead of filling the disk; admin actions never come near it.
const (
	AuditBurst      = 100
	AuditThereafter = 100
)

// AuditLogger returns log's child named "audit" (the stable name of the
// audit log: refused requests and admin actions, never a token), sampled
// as above.
func AuditLogger(log *zap.Logger) *zap.Logger {
	return log.Named("audit").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, AuditBurst, AuditThereafter)
	}))
}

// AuthFailureDelay is how long a refused credential (an unknown token at
// the line protocol's AUTH, the status page's login or its bearer and
// cookie) waits before its answer, so that guessing tokens costs the
// guesser time.
const AuthFailureDelay = 200 * time.Millisecond

// WaitAuthFailure waits d, or less when ctx ends: the delay of one refused
// credential. It holds up only the request (or connection) that presented
// it, never a lock other clients wait on, so a guesser cannot lock anyone
// else out.
func WaitAuthFailure(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// AuditRefused writes the audit line of a refused HTTP request ("request
// refused"): status (401, 403, 429), principal ("" when unknown), action
// and topic ("" when none), method, path, remote address and reason. The
// HTTP API and the status page both write it; reason must not hold a
// token.
func AuditRefused(audit *zap.Logger, r *http.Request, principal string, status int, action Action, topic, reason string) {
	audit.Info("request refused", zap.Int("status", status), zap.String("principal", principal), zap.String("action", string(action)),
		zap.String("topic", topic), zap.String("method", r.Method), zap.String("path", r.URL.Path),
		zap.String("remote", r.RemoteAddr), zap.String("reason", reason))
}

// AuditAdmin writes the audit line of an admin action over HTTP ("admin
// action"): principal, action admin, target (method and path), the
// action's status and outcome ("ok" below 400, else "failed"), remote
// address.
func AuditAdmin(audit *zap.Logger, r *http.Request, principal string, status int) {
	outcome := "ok"
	if status >= 400 {
		outcome = "failed"
	}
	audit.Info("admin action", zap.String("principal", principal), zap.String("action", string(ActionAdmin)),
		zap.String("target", r.Method+" "+r.URL.Path), zap.Int("status", status), zap.String("outcome", outcome),
		zap.String("remote", r.RemoteAddr))
}
