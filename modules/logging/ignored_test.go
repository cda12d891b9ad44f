package logging

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/config"
)

func TestLogIgnoredVarsOneDebugLineEach(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	logIgnoredVars(&config.Config{IgnoredVars: []string{"MMMQ_PORT", "MMMQ_SERVICE_HOST"}}, zap.New(core))
	entries := logs.All()
	if len(entries) != 2 {
		t.Fatalf("got %d log lines, want 2", len(entries))
	}
	for i, name := range []string{"MMMQ_PORT", "MMMQ_SERVICE_HOST"} {
		e := entries[i]
		if e.Level != zapcore.DebugLevel || e.LoggerName != "config" || e.ContextMap()["var"] != name {
			t.Errorf("line %d: %v %q %v", i, e.Level, e.LoggerName, e.ContextMap())
		}
	}
}
