package auth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/reload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func perm(actions []string, topics, groups []string) PermissionConfig {
	return PermissionConfig{Actions: actions, Topics: topics, Groups: groups}
}

func TestPermissions(t *testing.T) {
	p, err := newPrincipal("k", TokenConfig{Name: "billing", Permissions: []PermissionConfig{
		perm([]string{"publish", "read"}, []string{"order.**", "payment.*"}, nil),
		perm([]string{"consume"}, []string{"order.**"}, []string{"billing-*", "audit"}),
		perm([]string{"metrics"}, []string{"nothing"}, nil),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		action       contract.Action
		topic, group string
		want         bool
	}{
		{contract.ActionPublish, "order", "", true},
		{contract.ActionPublish, "order.new.eu", "", true},
		{contract.ActionPublish, "payment.card", "", true},
		{contract.ActionPublish, "payment.card.visa", "", false},
		{contract.ActionPublish, "orders", "", false},
		{contract.ActionRead, "order.x", "", true},
		{contract.ActionConsume, "order.x", "billing-eu", true},
		{contract.ActionConsume, "order.x", "billing-", true},
		{contract.ActionConsume, "order.x", "audit", true},
		{contract.ActionConsume, "order.x", "audit2", false},
		{contract.ActionConsume, "order.x", "ops", false},
		{contract.ActionConsume, "order.x", "", true}, // the group listing
		{contract.ActionConsume, "payment.card", "billing-eu", false},
		{contract.ActionPublish, "order.x", "", true},
		{contract.ActionAdmin, "", "", false},
		{contract.ActionAdmin, "order.x", "", false},
		{contract.ActionMetrics, "", "", true}, // topic-less: the topics do not apply
		{contract.ActionRead, "a..b", "", false},
	} {
		if got := p.Can(tt.action, tt.topic, tt.group); got != tt.want {
			t.Errorf("Can(%s, %q, %q) = %v, want %v", tt.action, tt.topic, tt.group, got, tt.want)
		}
	}
	all, _ := newPrincipal("k", TokenConfig{Name: "all", Permissions: []PermissionConfig{perm([]string{"read"}, nil, nil)}})
	if !all.Can(contract.ActionRead, "x.y.z", "") || all.Can(contract.ActionPublish, "x", "") {
		t.Error("topics default to ** and actions are only those listed")
	}
}

func TestGlob(t *testing.T) {
	for _, tt := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "abc", true}, {"a*", "b", false},
		{"*c", "abc", true}, {"a*c", "ac", true}, {"a*c", "abcbc", true}, {"a*c", "abcb", false},
		{"abc", "abc", true}, {"abc", "abcd", false}, {"**", "x", true}, {"a*b*c", "aXbYc", true}, {"a*b*c", "aXcYb", false},
	} {
		if got := Glob(tt.p, tt.s); got != tt.want {
			t.Errorf("Glob(%q, %q) = %v", tt.p, tt.s, got)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	tok, digest := NewToken()
	if !strings.HasPrefix(tok, TokenPrefix) || len(digest) != 64 || Digest(tok) != digest {
		t.Fatalf("NewToken: %q %q", tok, digest)
	}
	tok2, _ := NewToken()
	if tok2 == tok {
		t.Fatal("two NewToken calls gave the same token")
	}
	s, err := New(Config{Tokens: []TokenConfig{
		{Name: "a", TokenSHA256: Digest("other")},
		{Name: "b", TokenSHA256: digest},
		{Name: "c", ClientCN: "svc"},
	}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Enabled() {
		t.Fatal("not enabled with tokens")
	}
	if p, err := s.Authenticate(tok); err != nil || p.Name() != "b" {
		t.Fatalf("Authenticate: %v %v", p, err)
	}
	for _, bad := range []string{"", tok + "x", digest, "svc"} {
		if _, err := s.Authenticate(bad); !errors.Is(err, contract.ErrUnauthorized) {
			t.Errorf("Authenticate(%q) = %v, want ErrUnauthorized", bad, err)
		}
	}
	if p, err := s.AuthenticateCert("svc"); err != nil || p.Name() != "c" {
		t.Fatalf("AuthenticateCert: %v %v", p, err)
	}
	if _, err := s.AuthenticateCert("b"); !errors.Is(err, contract.ErrUnauthorized) {
		t.Error("a name is not a common name")
	}
	off, _ := New(Config{}, nil, nil)
	if off.Enabled() {
		t.Error("enabled without tokens")
	}
	if _, err := off.Authenticate(tok); err == nil {
		t.Error("authenticated with auth off")
	}
}

// TestTokenFileReload: a changed token file is picked up by polling and by
// SIGHUP's path (reload.Reloader.All), without a restart; the token never
// appears in the logs.
func TestTokenFileReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "billing.token")
	write := func(tok string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("\n  "+tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// A new modification time even on coarse clocks.
		future := time.Now().Add(time.Duration(len(tok)) * time.Second)
		if err := os.Chtimes(path, future, future); err != nil {
			t.Fatal(err)
		}
	}
	first, second, third := "mmmq_first-token", "mmmq_second-token-x", "mmmq_third-token-xyz"
	write(first)
	core, logs := observer.New(zap.DebugLevel)
	s, err := New(Config{Tokens: []TokenConfig{{Name: "billing", TokenFile: path}}}, nil, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	accepts := func(tok string) bool { _, err := s.Authenticate(tok); return err == nil }
	if !accepts(first) {
		t.Fatal("the file's token (whitespace trimmed) is refused")
	}

	write(second)
	s.Poll()
	if accepts(first) || !accepts(second) {
		t.Fatalf("after a poll: first accepted %v, second accepted %v", accepts(first), accepts(second))
	}

	write(third)
	r := reload.New([]contract.Reloader{s}, zap.New(core))
	if failed := r.All(context.Background()); failed != 0 {
		t.Fatalf("reload failed: %d", failed)
	}
	if accepts(second) || !accepts(third) {
		t.Fatal("SIGHUP's reload did not switch tokens")
	}

	// A broken file leaves the previous token in force and is reported once.
	if err := os.WriteFile(path, []byte("  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Poll()
	s.Poll()
	if !accepts(third) {
		t.Fatal("an emptied token file turned the token off")
	}
	if n := logs.FilterMessageSnippet("could not be read").Len(); n != 1 {
		t.Errorf("broken file reported %d times, want 1", n)
	}
	if r.All(context.Background()) != 1 {
		t.Error("reload of an empty token file succeeded")
	}
	for _, e := range logs.All() {
		line := e.Message
		for _, f := range e.Context {
			line += " " + f.String + " " + f.Key
			if f.Interface != nil {
				if err, ok := f.Interface.(error); ok {
					line += err.Error()
				}
			}
		}
		for _, tok := range []string{first, second, third} {
			if strings.Contains(line, tok) {
				t.Errorf("log line holds a token: %s", line)
			}
		}
	}

	if _, err := New(Config{Tokens: []TokenConfig{{Name: "x", TokenFile: filepath.Join(dir, "absent")}}}, nil, nil); err == nil ||
		!strings.Contains(err.Error(), "mmmq.auth.tokens[0].token-file") {
		t.Errorf("missing token file: %v", err)
	}
}

func TestPollingStartsAndStops(t *testing.T) {
	s, _ := New(Config{}, nil, nil)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestReloadReadsTheSource(t *testing.T) {
	next := Config{Tokens: []TokenConfig{{Name: "new", TokenSHA256: Digest("n")}}}
	var srcErr error
	s, _ := New(Config{Tokens: []TokenConfig{{Name: "old", TokenSHA256: Digest("o")}}},
		func() (Config, bool, error) { return next, true, srcErr }, nil)
	if err := s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate("o"); err == nil {
		t.Error("a token removed from the list is still accepted")
	}
	if p, err := s.Authenticate("n"); err != nil || p.Name() != "new" {
		t.Error("a token added to the list is refused")
	}
	srcErr = errors.New("bad file")
	if err := s.Reload(context.Background()); err == nil {
		t.Error("a failed re-read is not an error")
	}
	if _, err := s.Authenticate("n"); err != nil {
		t.Error("a failed reload changed the tokens")
	}
}

type limited struct{ lim contract.Limits }

func (limited) Name() string                             { return "p" }
func (limited) Can(contract.Action, string, string) bool { return true }
func (l limited) Limits() contract.Limits                { return l.lim }

func TestLimiter(t *testing.T) {
	l := NewLimiter()
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	p := limited{contract.Limits{MaxConcurrentRequests: 2, PublishRate: 2, PublishBurst: 4}}

	r1, err := l.Acquire(p, "request")
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := l.Acquire(p, "request")
	_, err = l.Acquire(p, "request")
	var rl *contract.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter < time.Second || rl.What != "concurrent requests" {
		t.Fatalf("third request: %v", err)
	}
	if contract.Classify(err).Status != 429 {
		t.Error("not 429")
	}
	if _, err := l.Acquire(p, "connection"); err != nil {
		t.Error("connections (no limit here) are counted apart from requests")
	}
	r1()
	r1() // a second release gives nothing back
	if _, err := l.Acquire(p, "request"); err != nil {
		t.Fatal("a released slot is not free")
	}
	if _, err := l.Acquire(p, "request"); err == nil {
		t.Fatal("a double release freed two slots")
	}
	r2()

	if err := l.Publish(p, 3); err != nil {
		t.Fatal(err)
	}
	err = l.Publish(p, 2) // 1 left
	if !errors.As(err, &rl) || rl.RetryAfter != 500*time.Millisecond || rl.What != "publish rate" {
		t.Fatalf("over the burst: %v", err)
	}
	now = now.Add(500 * time.Millisecond)
	if err := l.Publish(p, 2); err != nil {
		t.Fatalf("after Retry-After: %v", err)
	}
	now = now.Add(10 * time.Second) // full again: 4
	if err := l.Publish(p, 10); err != nil {
		t.Fatalf("a batch larger than the burst from a full bucket: %v", err)
	}
	if err := l.Publish(p, 1); err == nil {
		t.Fatal("the debt of a large batch is not paid")
	}
	// A reload that changes the rate starts a fresh bucket: the debt run
	// up at the old rate is not carried over.
	if err := l.Publish(limited{contract.Limits{PublishRate: 5, PublishBurst: 4}}, 1); err != nil {
		t.Fatalf("after a rate change: %v", err)
	}
	if err := l.Publish(limited{}, 1000); err != nil {
		t.Error("no rate: limited")
	}
}

// A token file holding another entry's token would make that token
// whichever entry matched last (a silent change of privileges): refused
// at start and on reload, naming both entries.
func TestSameTokenInTwoEntriesRefused(t *testing.T) {
	tok, digest := NewToken()
	file := filepath.Join(t.TempDir(), "ops.token")
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := Config{Tokens: []TokenConfig{
		{Name: "billing", TokenSHA256: digest, Permissions: []PermissionConfig{perm([]string{"publish"}, nil, nil)}},
		{Name: "ops", TokenFile: file, Permissions: []PermissionConfig{perm([]string{"admin"}, nil, nil)}},
	}}
	_, err := New(a, nil, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), "mmmq.auth.tokens[1].token-file: the same token as mmmq.auth.tokens[0].token-sha256") {
		t.Fatalf("New with one token in two entries: %v", err)
	}
	if strings.Contains(err.Error(), tok) {
		t.Error("the error holds the token")
	}
}

// Admin limited to some topics may delete and reopen those, but not use
// the dispatcher API (topic ""), which could push any topic anywhere.
func TestTopicScopedAdminHasNoDispatcherAPI(t *testing.T) {
	scoped, err := newPrincipal("k", TokenConfig{Name: "sa", TokenSHA256: strings.Repeat("a", 64),
		Permissions: []PermissionConfig{perm([]string{"admin"}, []string{"order.**"}, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	all, err := newPrincipal("k", TokenConfig{Name: "ops", TokenSHA256: strings.Repeat("b", 64),
		Permissions: []PermissionConfig{perm([]string{"admin"}, nil, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p     *principal
		topic string
		want  bool
	}{
		{scoped, "order.new", true}, {scoped, "payment.card", false}, {scoped, "", false},
		{all, "payment.card", true}, {all, "", true},
	} {
		if got := tc.p.Can(contract.ActionAdmin, tc.topic, ""); got != tc.want {
			t.Errorf("%s admin on %q = %v, want %v", tc.p.Name(), tc.topic, got, tc.want)
		}
	}
}

// Dead-letter topics are reserved: a "**" token (the default topics) does
// not reach them for any action, admin included; one naming
// "dead-letter" does. The dispatcher API (admin, topic "") still only
// needs "**", so an all-topics admin keeps redrive.
func TestReservedTopicsNeedANamingPattern(t *testing.T) {
	all, err := newPrincipal("k", TokenConfig{Name: "all", Permissions: []PermissionConfig{
		perm([]string{"publish", "read", "consume", "admin"}, nil, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	named, err := newPrincipal("k", TokenConfig{Name: "named", Permissions: []PermissionConfig{
		perm([]string{"publish", "read", "consume", "admin"}, []string{"**", "dead-letter.**"}, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []contract.Action{contract.ActionPublish, contract.ActionRead, contract.ActionConsume, contract.ActionAdmin} {
		if all.Can(a, "dead-letter.billing", "") || all.Can(a, "dead-letter.billing", "g") {
			t.Errorf("a ** token may %s on dead-letter.billing", a)
		}
		if !all.Can(a, "order.new", "") || !all.Can(a, "dead-letterx", "") {
			t.Errorf("a ** token may not %s on an ordinary topic", a)
		}
		if !named.Can(a, "dead-letter.billing", "") {
			t.Errorf("a dead-letter.** token may not %s on dead-letter.billing", a)
		}
	}
	if !all.Can(contract.ActionAdmin, "", "") {
		t.Error("an admin ** token lost the dispatcher API (redrive)")
	}
}

// At startup one warning names each token the reserved-topic rule took
// something from, and none the others.
func TestStartupWarnsTokensThatLostDeadLetters(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	tok := func(name string, perms ...PermissionConfig) TokenConfig {
		return TokenConfig{Name: name, TokenSHA256: Digest(name), Permissions: perms}
	}
	_, err := New(Config{Tokens: []TokenConfig{
		tok("reader", perm([]string{"read"}, nil, nil)),
		tok("sloppy", perm([]string{"publish"}, []string{"*.billing", "order.**"}, nil)),
		tok("kept", perm([]string{"read"}, []string{"**"}, nil), perm([]string{"read"}, []string{"dead-letter.**"}, nil)),
		tok("orders", perm([]string{"read", "publish"}, []string{"order.**"}, nil)),
		tok("metrics", perm([]string{"metrics"}, nil, nil)),
		tok("redriver", perm([]string{"admin"}, nil, nil)),
	}}, nil, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	var warned []string
	for _, e := range logs.FilterMessageSnippet("no longer reaches reserved topics").All() {
		warned = append(warned, e.ContextMap()["token"].(string))
		lost := strings.Join(stringsOf(e.ContextMap()["lost"]), ";")
		if !strings.Contains(lost, "dead-letter.**") {
			t.Errorf("warning %v does not name the topics", e.ContextMap())
		}
	}
	if want := "reader,sloppy,redriver"; strings.Join(warned, ",") != want {
		t.Errorf("warned tokens = %v, want %s", warned, want)
	}
}

// A token without permissions is valid but refused everything: startup
// warns about it, naming its key, and about no other.
func TestStartupWarnsTokensWithoutPermissions(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	_, err := New(Config{Tokens: []TokenConfig{
		{Name: "ops", TokenSHA256: Digest("ops"), Permissions: []PermissionConfig{perm([]string{"admin"}, nil, nil)}},
		{Name: "empty", TokenSHA256: Digest("empty"), Permissions: []PermissionConfig{}},
		{Name: "none", TokenSHA256: Digest("none")},
	}}, nil, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	var warned []string
	for _, e := range logs.FilterMessageSnippet("token has no permissions").All() {
		warned = append(warned, fmt.Sprint(e.ContextMap()["token"], "@", e.ContextMap()["key"]))
	}
	if want := "empty@mmmq.auth.tokens[1].permissions,none@mmmq.auth.tokens[2].permissions"; strings.Join(warned, ",") != want {
		t.Errorf("warned = %v, want %s", warned, want)
	}
}

func stringsOf(v any) []string {
	switch x := v.(type) {
	case []string:
		return x
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, e.(string))
		}
		return out
	}
	return nil
}
