package contract

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestAuditLoggerIsSampled(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	audit := AuditLogger(zap.New(core))
	for i := 0; i < 10*AuditBurst; i++ {
		audit.Info("request refused")
	}
	audit.Info("admin action")
	n := logs.FilterMessage("request refused").Len()
	if n < AuditBurst || n >= 2*AuditBurst {
		t.Errorf("%d of %d refusals written in one second, want the first %d and one in %d after", n, 10*AuditBurst, AuditBurst, AuditThereafter)
	}
	if logs.FilterMessage("admin action").Len() != 1 || logs.All()[0].LoggerName != "audit" {
		t.Errorf("admin action missing or logger not named audit: %+v", logs.All()[0])
	}
}

func TestWaitAuthFailure(t *testing.T) {
	start := time.Now()
	WaitAuthFailure(context.Background(), 20*time.Millisecond)
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("waited %v, want 20ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	WaitAuthFailure(ctx, time.Hour)
	if d := time.Since(start); d > time.Second {
		t.Errorf("waited %v after the context ended", d)
	}
}
