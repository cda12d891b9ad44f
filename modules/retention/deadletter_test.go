package retention

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/contract"
)

// Dead-letter topics are kept by the broker-wide limits: with max-bytes
// set globally an ordinary topic is cut down and a dead-letter topic keeps
// every message; an override naming dead-letter applies to it, one that
// does not ("**") does not.
func TestRetentionKeepsDeadLettersUnlessAnOverrideNamesThem(t *testing.T) {
	const segMax, maxBytes = 4096, 8192
	for _, tc := range []struct {
		name     string
		rules    []Rule
		wantKept bool
	}{
		{"global max-bytes", nil, true},
		{"override **", []Rule{{Pattern: contract.MustPattern("**"), Policy: contract.RetentionPolicy{MaxBytes: maxBytes}}}, true},
		{"override *.d", []Rule{{Pattern: contract.MustPattern("*.d"), Policy: contract.RetentionPolicy{MaxBytes: maxBytes}}}, true},
		{"override dead-letter.**", []Rule{{Pattern: contract.MustPattern("dead-letter.**"), Policy: contract.RetentionPolicy{MaxBytes: maxBytes}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, segMax)
			r := New(e.reg, Options{Default: contract.RetentionPolicy{MaxBytes: maxBytes}, Rules: tc.rules})
			dl := e.publish("dead-letter.d", 1000, time.Now())
			plain := e.publish("order.new", 1000, time.Now())
			r.Pass()
			if plain.StartOffset() == 0 {
				t.Errorf("order.new kept whole under max-bytes %d", maxBytes)
			}
			if kept := dl.StartOffset() == 0; kept != tc.wantKept {
				t.Errorf("dead-letter.d start offset %d: kept = %v, want %v", dl.StartOffset(), kept, tc.wantKept)
			}
		})
	}
	o := Options{Default: contract.RetentionPolicy{MaxAge: time.Hour}}
	if o.PolicyFor("dead-letter.x").Enabled() || !o.PolicyFor("order.x").Enabled() {
		t.Error("PolicyFor: the default applies to dead-letter.x or not to order.x")
	}
}

// Startup says which rule applies to dead-letter topics; a pass warns when
// one crosses a power of two from WarnFromBytes on, once per power.
func TestRetentionLogsAndWarnsAboutDeadLetters(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	e := newEnv(t, 1<<20)
	r := New(e.reg, Options{Default: contract.RetentionPolicy{MaxBytes: 1 << 30}, CheckInterval: time.Hour, Logger: zap.New(core)})
	r.Start()
	r.Stop()
	started := logs.FilterMessage("retention started").All()
	if len(started) != 1 || !strings.HasPrefix(fmt.Sprint(started[0].ContextMap()["retention-of-dead-letter.**"]), "kept") {
		t.Fatalf("startup log = %v, want it to say dead letters are kept", started)
	}
	named := Options{Rules: []Rule{{Pattern: contract.MustPattern("dead-letter.billing")}}}.ReservedRules()
	if s := named[0].String; !strings.Contains(s, "dead-letter.billing") {
		t.Errorf("with an override naming them: %q", s)
	}

	warns := func() int { return logs.FilterMessageSnippet("dead-letter topic growing").Len() }
	per := int(e.publish("dead-letter.d", 1, time.Now()).Stats().Bytes)
	r.Pass()
	if warns() != 0 {
		t.Fatalf("warned at %d bytes", per)
	}
	q := e.publish("dead-letter.d", WarnFromBytes/per+1, time.Now())
	r.Pass()
	r.Pass()
	if warns() != 1 {
		t.Fatalf("warnings at %d bytes = %d, want 1", q.Stats().Bytes, warns())
	}
	w := logs.FilterMessageSnippet("dead-letter topic growing").All()[0].ContextMap()
	if w["topic"] != "dead-letter.d" || w["bytes"].(int64) < WarnFromBytes || w["crossed-bytes"].(int64) != WarnFromBytes {
		t.Errorf("warning = %v", w)
	}
	e.publish("dead-letter.d", WarnFromBytes/per/4, time.Now()) // still below 2 MiB
	r.Pass()
	if warns() != 1 {
		t.Errorf("warned again below the next power of two")
	}
	e.publish("dead-letter.d", WarnFromBytes/per, time.Now()) // past 2 MiB
	r.Pass()
	if warns() != 2 {
		t.Errorf("warnings past 2 MiB = %d, want 2", warns())
	}
	if e.publish("order.big", 3*WarnFromBytes/per, time.Now()); true {
		r.Pass()
	}
	if warns() != 2 {
		t.Error("warned about an ordinary topic")
	}
}
