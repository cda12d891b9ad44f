package contract

import (
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
