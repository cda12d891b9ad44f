package lineproto

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
)

// grant is one permission of a fakePrincipal; group "" is any group.
type grant struct {
	action       contract.Action
	topic, group string
}

type fakePrincipal struct {
	name   string
	grants []grant
}

func (p *fakePrincipal) Name() string            { return p.name }
func (p *fakePrincipal) Limits() contract.Limits { return contract.Limits{} }
func (p *fakePrincipal) Can(a contract.Action, topic, group string) bool {
	for _, g := range p.grants {
		if g.action == a && g.topic == topic && (g.group == "" || g.group == group) {
			return true
		}
	}
	return false
}

// fakeAuth is a contract.Authenticator over fixed maps; tests change them
// (a reload) under mu.
type fakeAuth struct {
	mu       sync.Mutex
	disabled bool
	tokens   map[string]contract.Principal
	certs    map[string]contract.Principal
}

func (a *fakeAuth) Enabled() bool { a.mu.Lock(); defer a.mu.Unlock(); return !a.disabled }

func (a *fakeAuth) Authenticate(token string) (contract.Principal, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.tokens[token]; ok {
		return p, nil
	}
	return nil, contract.ErrUnauthorized
}

func (a *fakeAuth) AuthenticateCert(cn string) (contract.Principal, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.certs[cn]; ok {
		return p, nil
	}
	return nil, contract.ErrUnauthorized
}

// The test tokens. Each is long and unusual so that a scan of replies and
// logs finds any copy of it.
const (
	tokAll       = "tok-ALL-5f2b9c1e7d"       // everything on t (publish, consume any group, read)
	tokReader    = "tok-READER-8a1c3e5f0b"    // read t
	tokPublisher = "tok-PUBLISHER-2d4f6a8c0e" // publish t
	tokGroupH    = "tok-GROUPH-9e7c5a3b1d"    // consume t as group h only, read t
	tokBad       = "tok-WRONG-0000deadbeef"   // not a token
)

var allTokens = []string{tokAll, tokReader, tokPublisher, tokGroupH, tokBad}

func newFakeAuth() *fakeAuth {
	all := &fakePrincipal{"all", []grant{{contract.ActionPublish, "t", ""}, {contract.ActionConsume, "t", ""}, {contract.ActionRead, "t", ""}}}
	return &fakeAuth{
		tokens: map[string]contract.Principal{
			tokAll:       all,
			tokReader:    &fakePrincipal{"reader", []grant{{contract.ActionRead, "t", ""}}},
			tokPublisher: &fakePrincipal{"publisher", []grant{{contract.ActionPublish, "t", ""}}},
			tokGroupH:    &fakePrincipal{"group-h", []grant{{contract.ActionConsume, "t", "h"}, {contract.ActionRead, "t", ""}}},
		},
		certs: map[string]contract.Principal{
			"billing": &fakePrincipal{"billing", []grant{{contract.ActionPublish, "t", ""}}},
		},
	}
}

// fakeLimiter allows maxConns connections per principal name (0: any) and
// publishes messages in all (-1: any); a refusal says retry.
type fakeLimiter struct {
	mu       sync.Mutex
	maxConns int
	conns    map[string]int
	publish  int
	retry    time.Duration
}

func (l *fakeLimiter) Acquire(p contract.Principal, kind string) (func(), error) {
	if kind != "connection" {
		return nil, fmt.Errorf("kind %q", kind)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.maxConns > 0 && l.conns[p.Name()] >= l.maxConns {
		return nil, &contract.RateLimitedError{Principal: p.Name(), What: "connections", RetryAfter: l.retry}
	}
	l.conns[p.Name()]++
	var once sync.Once
	return func() {
		once.Do(func() { l.mu.Lock(); l.conns[p.Name()]--; l.mu.Unlock() })
	}, nil
}

func (l *fakeLimiter) Publish(p contract.Principal, n int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.publish >= 0 && l.publish < n {
		return &contract.RateLimitedError{Principal: p.Name(), What: "publish rate", RetryAfter: l.retry}
	}
	if l.publish >= 0 {
		l.publish -= n
	}
	return nil
}

func (l *fakeLimiter) open(name string) int { l.mu.Lock(); defer l.mu.Unlock(); return l.conns[name] }

// authEnv is a server with authentication on (fa, and fl unless nil) whose
// logs, audit included, are observed; topic t holds one message (offset 0).
type authEnv struct {
	*testEnv
	logs *observer.ObservedLogs
}

func startAuth(t *testing.T, fa *fakeAuth, fl contract.Limiter, opts Options) *authEnv {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	opts.Logger = zap.New(core).Named("lineproto")
	opts.AuditLogger = zap.New(core).Named("audit")
	opts.Authenticator = fa
	if fl != nil {
		opts.Limiter = fl
	}
	e := &authEnv{testEnv: start(t, opts, groups.Options{}), logs: logs}
	if fa != nil && fa.Enabled() {
		c := e.dial(t)
		c.auth(tokAll)
		expectPrefix(t, c.do(`PUB t DURABLE {"seed":0}`), "OK 0 DURABLE")
		c.nc.Close()
	}
	return e
}

// auth sends AUTH token and expects OK AUTH.
func (c *client) auth(token string) {
	c.t.Helper()
	expectPrefix(c.t, c.do("AUTH "+token), "OK AUTH ")
}

// expectClosed reads until the server closes the connection (EOF), with no
// further reply.
func (c *client) expectClosed() {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, err := c.r.ReadString('\n'); !errors.Is(err, io.EOF) {
		c.t.Fatalf("want the connection closed, got %q, %v", l, err)
	}
}

func (e *authEnv) next(t *testing.T) int64 {
	t.Helper()
	q, ok := e.reg.Get("t")
	if !ok {
		t.Fatal("topic t is gone")
	}
	return q.Stats().NextOffset
}

// TestAuthEveryCommand: each command × {no AUTH, bad token, token without
// the permission, token with it} → ERR UNAUTHORIZED and closed / ERR
// UNAUTHORIZED and closed / ERR FORBIDDEN <action> t and open / its normal
// reply; only the last one stores or moves anything.
func TestAuthEveryCommand(t *testing.T) {
	const delay = 100 * time.Millisecond
	for _, tc := range []struct {
		line    string
		setup   string // sent first with the permitted token (a FETCH)
		action  contract.Action
		ok      string
		without string
		stores  bool
	}{
		{line: `PUB t DURABLE {"x":1}`, action: contract.ActionPublish, ok: "OK 1 DURABLE", without: tokReader, stores: true},
		{line: `PUB t ACCEPTED {"x":1}`, action: contract.ActionPublish, ok: "OK - ACCEPTED", without: tokGroupH, stores: true},
		{line: `PUBID t DURABLE k1 {"x":1}`, action: contract.ActionPublish, ok: "OK 1 DURABLE", without: tokReader, stores: true},
		{line: "FETCH t g 1 0", action: contract.ActionConsume, ok: "MSG 0 ", without: tokGroupH},
		{line: "FETCH t g 1 0 from=0", action: contract.ActionConsume, ok: "MSG 0 ", without: tokPublisher},
		{line: "ACK t g 0", setup: "FETCH t g 1 0", action: contract.ActionConsume, ok: "ACKED 1", without: tokGroupH},
		{line: "ACKX t g offsets=0", setup: "FETCH t g 1 0 mode=shared", action: contract.ActionConsume, ok: "ACKED 1 acked=1 already=0", without: tokGroupH},
		{line: "NACKX t g offsets=0", setup: "FETCH t g 1 0 mode=shared", action: contract.ActionConsume, ok: "NACKED 0 nacked=1 already=0", without: tokPublisher},
		{line: "STATUS t", action: contract.ActionRead, ok: "TOPIC t next=1 ", without: tokPublisher},
	} {
		t.Run(tc.line+"/no-auth", func(t *testing.T) {
			e := startAuth(t, newFakeAuth(), nil, Options{AuthFailureDelay: delay})
			c := e.dial(t)
			expectPrefix(t, c.do(tc.line), "ERR UNAUTHORIZED ")
			c.expectClosed()
			if n := e.next(t); n != 1 {
				t.Fatalf("next offset %d after a refused %q", n, tc.line)
			}
		})
		t.Run(tc.line+"/bad-token", func(t *testing.T) {
			e := startAuth(t, newFakeAuth(), nil, Options{AuthFailureDelay: delay})
			c := e.dial(t)
			begin := time.Now()
			c.send("AUTH " + tokBad + "\n" + tc.line) // pipelined: must not run
			expectPrefix(t, c.read(), "ERR UNAUTHORIZED ")
			if d := time.Since(begin); d < delay {
				t.Fatalf("a bad AUTH was answered after %s, before the %s delay", d, delay)
			}
			c.expectClosed()
			if n := e.next(t); n != 1 {
				t.Fatalf("next offset %d after a refused %q", n, tc.line)
			}
		})
		t.Run(tc.line+"/without-permission", func(t *testing.T) {
			e := startAuth(t, newFakeAuth(), nil, Options{AuthFailureDelay: delay})
			c := e.dial(t)
			c.auth(tc.without)
			expectPrefix(t, c.do(tc.line), fmt.Sprintf("ERR FORBIDDEN %s t ", tc.action))
			expectPrefix(t, c.do("AUTH x"), "ERR BAD_REQUEST ") // still open
			if n := e.next(t); n != 1 {
				t.Fatalf("next offset %d after a forbidden %q", n, tc.line)
			}
			if got := e.logs.FilterLoggerName("audit").FilterField(zap.String("code", "FORBIDDEN")).Len(); got != 1 {
				t.Fatalf("%d FORBIDDEN audit entries, want 1", got)
			}
		})
		t.Run(tc.line+"/with-permission", func(t *testing.T) {
			e := startAuth(t, newFakeAuth(), nil, Options{AuthFailureDelay: delay})
			c := e.dial(t)
			if got := c.do("AUTH " + tokAll); got != "OK AUTH all" {
				t.Fatalf("AUTH: %q", got)
			}
			if tc.setup != "" {
				c.fetch(tc.setup)
			}
			expectPrefix(t, c.do(tc.line), tc.ok)
			want := int64(1)
			if tc.stores {
				want = 2
			}
			if n := e.next(t); n != want && !strings.Contains(tc.line, "ACCEPTED") {
				t.Fatalf("next offset %d, want %d", n, want)
			}
		})
	}
}

// TestAuthFirstLine: anything but AUTH first (an unknown word, an empty
// line, a bare token) is refused and closed without a delay; AUTH without a
// token is a bad token.
func TestAuthFirstLine(t *testing.T) {
	e := startAuth(t, newFakeAuth(), nil, Options{AuthFailureDelay: time.Second})
	for _, line := range []string{"STATUS", "", "HELLO", tokAll, "AUTH", "AUTH " + tokAll + " extra"} {
		c := e.dial(t)
		begin := time.Now()
		expectPrefix(t, c.do(line), "ERR UNAUTHORIZED ")
		c.expectClosed()
		slow := time.Since(begin) >= time.Second
		if isAuth := strings.HasPrefix(line, "AUTH"); slow != isAuth {
			t.Fatalf("%q refused after %s (delayed: want %t)", line, time.Since(begin), isAuth)
		}
	}
	// AUTH is case-insensitive, like every command word.
	c := e.dial(t)
	if got := c.do("auth " + tokReader); got != "OK AUTH reader" {
		t.Fatalf("auth: %q", got)
	}
}

// TestAuthSecondAuthRefused: a second AUTH is ERR BAD_REQUEST whatever its
// token (not looked at), and the connection keeps its principal.
func TestAuthSecondAuthRefused(t *testing.T) {
	const delay = 3 * time.Second
	e := startAuth(t, newFakeAuth(), nil, Options{AuthFailureDelay: delay})
	c := e.dial(t)
	c.auth(tokPublisher)
	for _, tok := range []string{tokAll, tokBad} {
		begin := time.Now()
		expectPrefix(t, c.do("AUTH "+tok), "ERR BAD_REQUEST already authenticated as publisher")
		if d := time.Since(begin); d >= delay {
			t.Fatalf("second AUTH took %s", d)
		}
	}
	expectPrefix(t, c.do("STATUS t"), "ERR FORBIDDEN read t ")
	expectPrefix(t, c.do(`PUB t DURABLE 1`), "OK 1 DURABLE")
}

// TestAuthStatusListsReadableTopics: STATUS without a topic lists only the
// topics the principal may read.
func TestAuthStatusListsReadableTopics(t *testing.T) {
	fa := newFakeAuth()
	e := startAuth(t, fa, nil, Options{})
	fa.tokens[tokAll].(*fakePrincipal).grants = append(fa.tokens[tokAll].(*fakePrincipal).grants, grant{contract.ActionPublish, "u", ""})
	c := e.dial(t)
	c.auth(tokAll)
	expectPrefix(t, c.do(`PUB u DURABLE 1`), "OK 0 DURABLE")
	r := e.dial(t)
	r.auth(tokReader)
	r.send("STATUS")
	expectPrefix(t, r.read(), "TOPIC t ")
	expectPrefix(t, r.read(), "END 1")
	p := e.dial(t)
	p.auth(tokPublisher)
	expectPrefix(t, p.do("STATUS"), "END 0")
	expectPrefix(t, p.do("STATUS u"), "ERR FORBIDDEN read u ")

	// A group's line is shown only to whom may consume as that group.
	expectPrefix(t, c.do(`PUB t DURABLE 1`), "OK ")
	c.send("FETCH t g 1 0")
	expectPrefix(t, c.read(), "MSG ")
	for c.read() != "END 1" {
	}
	c.send("STATUS t")
	expectPrefix(t, c.read(), "TOPIC t ")
	expectPrefix(t, c.read(), "GROUP t g ")
	r.send("STATUS t")
	expectPrefix(t, r.read(), "TOPIC t ")
	expectPrefix(t, r.read(), "END 1")
}

// TestAuthOff: an Authenticator that is not Enabled (or none) leaves the
// protocol open; AUTH is answered "OK AUTH" without a name.
func TestAuthOff(t *testing.T) {
	for _, fa := range []*fakeAuth{nil, {disabled: true}} {
		opts := Options{}
		if fa != nil {
			opts.Authenticator = fa
		}
		e := start(t, opts, groups.Options{})
		c := e.dial(t)
		expectPrefix(t, c.do(`PUB t DURABLE 1`), "OK 0 DURABLE")
		if got := c.do("AUTH " + tokBad); got != "OK AUTH" {
			t.Fatalf("AUTH with auth off: %q", got)
		}
		if got := c.do("AUTH"); got != "OK AUTH" {
			t.Fatalf("AUTH with auth off: %q", got)
		}
		expectPrefix(t, c.do("STATUS t"), "TOPIC t next=1 ")
	}
}

// TestAuthReload: a token removed by a reload ends the connections that
// used it at their next request; auth turned on by a reload makes an
// unauthenticated connection send AUTH first.
func TestAuthReload(t *testing.T) {
	fa := newFakeAuth()
	e := startAuth(t, fa, nil, Options{})
	c := e.dial(t)
	c.auth(tokPublisher)
	expectPrefix(t, c.do(`PUB t DURABLE 1`), "OK 1 ")
	fa.mu.Lock()
	delete(fa.tokens, tokPublisher)
	fa.mu.Unlock()
	expectPrefix(t, c.do(`PUB t DURABLE 2`), "ERR UNAUTHORIZED ")
	c.expectClosed()

	fa.mu.Lock()
	fa.disabled = true
	fa.mu.Unlock()
	o := e.dial(t)
	expectPrefix(t, o.do(`PUB t DURABLE 3`), "OK 2 ")
	fa.mu.Lock()
	fa.disabled = false
	fa.mu.Unlock()
	expectPrefix(t, o.do(`PUB t DURABLE 4`), "ERR UNAUTHORIZED ")
	o.expectClosed()
	if n := e.next(t); n != 3 {
		t.Fatalf("next offset %d, want 3", n)
	}
}

// TestAuthReloadOffAndOn: a connection authenticated before authentication
// was turned off and on again authenticates again, and holds one
// connection slot, not two.
func TestAuthReloadOffAndOn(t *testing.T) {
	fa := newFakeAuth()
	fl := &fakeLimiter{maxConns: 1, conns: map[string]int{}, publish: -1, retry: time.Second}
	e := startAuth(t, fa, fl, Options{})
	c := e.dial(t)
	c.auth(tokPublisher)
	for _, disabled := range []bool{true, false} {
		fa.mu.Lock()
		fa.disabled = disabled
		fa.mu.Unlock()
		expectPrefix(t, c.do("AUTH "+tokPublisher), "OK AUTH")
	}
	if n := fl.open("publisher"); n != 1 {
		t.Fatalf("%d connection slots held, want 1", n)
	}
	c.nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for fl.open("publisher") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the connection slot was not released on close")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAuthTimeout: a connection that does not authenticate within
// AuthTimeout is closed.
func TestAuthTimeout(t *testing.T) {
	e := startAuth(t, newFakeAuth(), nil, Options{AuthTimeout: 100 * time.Millisecond})
	c := e.dial(t)
	begin := time.Now()
	c.expectClosed()
	if d := time.Since(begin); d > 3*time.Second {
		t.Fatalf("closed after %s", d)
	}
}

// TestAuthConnectionLimit: over max-connections the AUTH is answered ERR
// RATE_LIMITED <seconds> and closed; closing a connection gives its slot
// back.
func TestAuthConnectionLimit(t *testing.T) {
	fl := &fakeLimiter{maxConns: 1, conns: map[string]int{}, publish: -1, retry: 2500 * time.Millisecond}
	e := startAuth(t, newFakeAuth(), fl, Options{})
	c1 := e.dial(t)
	c1.auth(tokPublisher)
	c2 := e.dial(t)
	expectPrefix(t, c2.do("AUTH "+tokPublisher), "ERR RATE_LIMITED 3 ")
	c2.expectClosed()
	c3 := e.dial(t) // another principal has its own limit
	c3.auth(tokReader)
	c1.nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for fl.open("publisher") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the connection slot was not released on close")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c4 := e.dial(t)
	c4.auth(tokPublisher)
	if n := e.logs.FilterLoggerName("audit").FilterField(zap.String("code", "RATE_LIMITED")).Len(); n != 1 {
		t.Fatalf("%d RATE_LIMITED audit entries, want 1", n)
	}
}

// TestAuthPublishRate: over the publish rate PUB and PUBID are answered ERR
// RATE_LIMITED <seconds>, store nothing, and the connection stays open.
func TestAuthPublishRate(t *testing.T) {
	fl := &fakeLimiter{conns: map[string]int{}, publish: -1, retry: 200 * time.Millisecond}
	e := startAuth(t, newFakeAuth(), fl, Options{})
	fl.mu.Lock()
	fl.publish = 1
	fl.mu.Unlock()
	c := e.dial(t)
	c.auth(tokAll)
	expectPrefix(t, c.do(`PUB t DURABLE 1`), "OK 1 DURABLE")
	expectPrefix(t, c.do(`PUB t DURABLE 2`), "ERR RATE_LIMITED 1 ")
	expectPrefix(t, c.do(`PUBID t DURABLE k {}`), "ERR RATE_LIMITED 1 ")
	// Refused before the rate: a bad request or a forbidden topic takes
	// nothing from the bucket.
	expectPrefix(t, c.do(`PUB t DURABLE {bad`), "ERR BAD_REQUEST ")
	expectPrefix(t, c.do(`PUB v DURABLE 1`), "ERR FORBIDDEN publish v ")
	expectPrefix(t, c.do("STATUS t"), "TOPIC t next=2 ")
	if n := e.next(t); n != 2 {
		t.Fatalf("next offset %d, want 2", n)
	}
}

// TestAuthTokenNeverLeaks: no reply and no log entry (audit included, at
// debug level) contains a token, whatever the client sends.
func TestAuthTokenNeverLeaks(t *testing.T) {
	fl := &fakeLimiter{maxConns: 1, conns: map[string]int{}, publish: 1, retry: time.Second}
	e := startAuth(t, newFakeAuth(), fl, Options{AuthFailureDelay: time.Millisecond})
	var replies []string
	converse := func(lines ...string) {
		c := e.dial(t)
		for _, l := range lines {
			c.send(l)
		}
		// Until the server closes it, or for a moment when it stays open.
		_ = c.nc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		b, err := io.ReadAll(c.r)
		if err != nil && !isTimeout(err) {
			t.Fatal(err)
		}
		replies = append(replies, string(b))
		c.nc.Close()
	}
	converse(tokAll)                              // a bare token as the first line
	converse("AUTH " + tokBad)                    // a wrong token
	converse("AUTH  "+tokBad, "PUB t DURABLE 1")  // a wrong token, pipelined
	converse("AUTH "+tokAll+" "+tokBad, "STATUS") // two words
	converse(tokBad+" "+tokAll, "AUTH "+tokAll)   // a token-like command word
	converse("AUTH "+tokReader, "AUTH "+tokAll, tokAll, "PUB t DURABLE 1", "STATUS v", "BYE "+tokAll, "AUTH", "")
	converse("AUTH "+tokAll, `PUB t DURABLE 1`, `PUB t DURABLE 2`, "FETCH t g 1 0")
	converse("AUTH " + tokAll) // possibly over the connection limit
	all := strings.Join(replies, "")
	for _, want := range []string{"ERR UNAUTHORIZED", "ERR FORBIDDEN", "ERR RATE_LIMITED", "ERR BAD_REQUEST", "OK AUTH reader"} {
		if !strings.Contains(all, want) {
			t.Fatalf("the conversations never got %q:\n%s", want, all)
		}
	}
	for _, tok := range allTokens {
		if strings.Contains(all, tok) {
			t.Fatalf("a reply contains token %q:\n%s", tok, all)
		}
		for _, en := range e.logs.All() {
			text := en.LoggerName + " " + en.Message + " " + fmt.Sprint(en.ContextMap())
			if strings.Contains(text, tok) {
				t.Fatalf("a log entry contains token %q: %s", tok, text)
			}
		}
	}
	if e.logs.FilterLoggerName("audit").Len() < 4 {
		t.Fatalf("only %d audit entries", e.logs.FilterLoggerName("audit").Len())
	}
}

// TestAuthPreAuthLineLimit: before AUTH a line may be at most
// PreAuthMaxLineBytes, so an unauthenticated client cannot make the broker
// hold max-line-bytes per connection; once authenticated the usual limit
// applies.
func TestAuthPreAuthLineLimit(t *testing.T) {
	e := startAuth(t, newFakeAuth(), nil, Options{MaxLineBytes: 64 << 10})
	c := e.dial(t)
	expectPrefix(t, c.do("PUB t DURABLE "+strings.Repeat("x", PreAuthMaxLineBytes)), "ERR UNAUTHORIZED a line before AUTH is over 4096 bytes")
	c.expectClosed()
	c = e.dial(t)
	c.auth(tokAll)
	// Past the line reader: the record limit (512 bytes here) answers.
	expectPrefix(t, c.do(`PUB t DURABLE "`+strings.Repeat("x", 2*PreAuthMaxLineBytes)+`"`), "ERR TOO_LARGE payload of")
}
