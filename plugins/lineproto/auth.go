package lineproto

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/servertls"
)

// Defaults of the authentication options.
const (
	// DefaultAuthTimeout is how long a connection may take to authenticate
	// (its first line) while authentication is on; then it is closed.
	DefaultAuthTimeout = 10 * time.Second
	// DefaultAuthFailureDelay is how long a refused AUTH (or client
	// certificate) waits before its ERR UNAUTHORIZED, so that guessing
	// tokens costs the guesser time and a connection slot.
	DefaultAuthFailureDelay = contract.AuthFailureDelay
)

// authState is a connection's authentication (see the package
// documentation, Authentication).
type authState struct {
	// principal is nil before authentication and while authentication is
	// off.
	principal contract.Principal
	// ctx carries principal (contract.WithPrincipal); context.Background
	// when there is none, so contract.Authorize lets everything through.
	ctx context.Context
	// token is the AUTH token, kept to authenticate it again before each
	// request (a reload may have revoked or changed it). Never logged, never
	// echoed.
	token string
	// certCN is the client certificate's common name when the certificate
	// authenticated the connection ("" otherwise).
	certCN string
	// release gives back the connection slot (Limiter.Acquire "connection").
	release func()
}

// authEnabled reports whether requests need a principal now.
func (c *conn) authEnabled() bool {
	a := c.s.opts.Authenticator
	return a != nil && a.Enabled()
}

// admit runs before each request line. run: handle the line as a request
// (otherwise admit wrote its reply, if any); closeConn: close the
// connection after the reply.
func (c *conn) admit(line []byte) (run, closeConn bool) {
	cmd, rest, _ := bytes.Cut(line, []byte{' '})
	isAuth := bytes.EqualFold(cmd, []byte("AUTH"))
	if !c.authEnabled() {
		// Off (or turned off by a reload): nothing is checked, and AUTH is
		// accepted without looking at the token, so a client configured
		// with a token also works against a broker without tokens.
		c.setPrincipal(nil)
		if isAuth {
			c.replyf("OK AUTH")
			return false, false
		}
		return true, false
	}
	if c.auth.principal == nil {
		return c.login(cmd, isAuth, rest)
	}
	if err := c.reauthenticate(); err != nil {
		c.audit("credentials no longer accepted", commandName(cmd), "", "", "", contract.CodeUnauthorized, nil)
		c.replyf("ERR %s the connection's credentials are no longer accepted (the token list was reloaded); closing the connection", contract.CodeUnauthorized)
		return false, true
	}
	if isAuth {
		// The token is not looked at: a second AUTH is no oracle either.
		c.replyf("ERR %s already authenticated as %s; open a new connection to use another token", contract.CodeBadRequest, oneLine(c.auth.principal.Name()))
		return false, false
	}
	return true, false
}

// login authenticates the connection's first line: AUTH <token>, or any
// request on a TLS connection with a verified client certificate whose
// common name is a principal (AUTH first is judged by its token even then).
// Refused: ERR UNAUTHORIZED and close.
func (c *conn) login(cmd []byte, isAuth bool, token []byte) (run, closeConn bool) {
	a := c.s.opts.Authenticator
	var (
		p   contract.Principal
		err error
	)
	// A connection authenticated before a reload turned authentication
	// off and on again starts over.
	c.releaseAuth()
	cn, hasCert := c.peerCommonName()
	switch {
	case isAuth:
		tok := string(bytes.TrimSpace(token))
		if p, err = a.Authenticate(tok); err == nil {
			c.auth.token = tok
		}
	case hasCert:
		if p, err = a.AuthenticateCert(cn); err == nil {
			c.auth.certCN = cn
		}
	default:
		c.audit("unauthenticated request", commandName(cmd), "", "", "", contract.CodeUnauthorized, nil)
		c.replyf("ERR %s authentication required: send AUTH <token> as the first line; closing the connection", contract.CodeUnauthorized)
		return false, true
	}
	if err == nil && p == nil {
		err = contract.ErrUnauthorized
	}
	if err != nil {
		c.failureDelay()
		c.audit("authentication refused", commandName(cmd), "", "", "", contract.CodeUnauthorized, nil)
		c.replyf("ERR %s unknown token or client certificate; closing the connection", contract.CodeUnauthorized)
		return false, true
	}
	if l := c.s.opts.Limiter; l != nil {
		release, err := l.Acquire(p, "connection")
		if err != nil {
			c.replyRateLimited(p.Name(), commandName(cmd), "", err)
			return false, true
		}
		c.auth.release = release
	}
	c.setPrincipal(p)
	if isAuth {
		c.replyf("OK AUTH %s", oneLine(p.Name()))
		return false, false
	}
	return true, false
}

// reauthenticate looks the connection's credentials up again, so a token
// removed or changed by a reload stops working on open connections too.
func (c *conn) reauthenticate() error {
	a := c.s.opts.Authenticator
	var (
		p   contract.Principal
		err error
	)
	if c.auth.certCN != "" {
		p, err = a.AuthenticateCert(c.auth.certCN)
	} else {
		p, err = a.Authenticate(c.auth.token)
	}
	if err == nil && p == nil {
		err = contract.ErrUnauthorized
	}
	if err != nil {
		return err
	}
	c.setPrincipal(p)
	return nil
}

func (c *conn) setPrincipal(p contract.Principal) {
	if p == nil {
		if c.auth.principal != nil {
			c.auth.principal, c.auth.ctx = nil, context.Background()
		}
		return
	}
	if p != c.auth.principal {
		c.auth.principal, c.auth.ctx = p, contract.WithPrincipal(context.Background(), p)
	}
}

// releaseAuth gives back the connection slot and forgets the credentials.
func (c *conn) releaseAuth() {
	if c.auth.release != nil {
		c.auth.release()
		c.auth.release = nil
	}
	c.auth.token, c.auth.certCN = "", ""
}

// peerCommonName returns the subject common name of the connection's
// verified client certificate (TLS with client-certificate verification;
// the handshake is done by the time a line was read).
func (c *conn) peerCommonName() (string, bool) {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return "", false
	}
	st := tc.ConnectionState()
	if !st.HandshakeComplete {
		return "", false
	}
	cn := servertls.PeerCommonName(&st)
	return cn, cn != ""
}

// failureDelay waits Options.AuthFailureDelay (less when the server stops).
func (c *conn) failureDelay() {
	contract.WaitAuthFailure(c.s.ctx, c.s.opts.AuthFailureDelay)
}

// allowed reports whether the connection's principal may do action on
// topic (and, for consume, as group); when not it answers
// "ERR FORBIDDEN <action> <topic> <text>" and writes an audit entry. With
// authentication off every request is allowed.
func (c *conn) allowed(cmd string, action contract.Action, topic, group string) bool {
	err := contract.Authorize(c.auth.ctx, action, topic, group)
	if err == nil {
		return true
	}
	c.audit("forbidden", cmd, action, topic, group, contract.CodeForbidden, err)
	c.replyf("ERR %s %s %s %s", contract.CodeForbidden, action, oneLine(topic), oneLine(err.Error()))
	return false
}

// publishAllowed takes one message from the principal's publish rate
// (Limiter.Publish); over it, it answers
// "ERR RATE_LIMITED <retry-after-seconds> <text>".
func (c *conn) publishAllowed(cmd, topic string) bool {
	l, p := c.s.opts.Limiter, c.auth.principal
	if l == nil || p == nil {
		return true
	}
	err := l.Publish(p, 1)
	if err == nil {
		return true
	}
	c.replyRateLimited(p.Name(), cmd, topic, err)
	return false
}

// replyRateLimited answers a Limiter refusal:
// "ERR RATE_LIMITED <retry-after-seconds> <text>" (seconds rounded up, at
// least 1), and writes an audit entry.
func (c *conn) replyRateLimited(principal, cmd, topic string, err error) {
	c.auditAs(principal, "rate limited", cmd, "", topic, "", contract.CodeRateLimited, err)
	var rl *contract.RateLimitedError
	if !errors.As(err, &rl) {
		c.replyErr(errCode(err), err)
		return
	}
	secs := max(1, int64(math.Ceil(rl.RetryAfter.Seconds())))
	c.replyf("ERR %s %d %s", contract.CodeRateLimited, secs, oneLine(err.Error()))
}

// audit logs a refused request on the audit logger (Options.AuditLogger),
// at info level: principal (when known), command, action, topic, group,
// remote address, code and reason. Never the token: callers pass a known
// command word (commandName) and errors that do not contain it.
func (c *conn) audit(msg, cmd string, action contract.Action, topic, group, code string, reason error) {
	name := ""
	if c.auth.principal != nil {
		name = c.auth.principal.Name()
	}
	c.auditAs(name, msg, cmd, action, topic, group, code, reason)
}

func (c *conn) auditAs(principal, msg, cmd string, action contract.Action, topic, group, code string, reason error) {
	fields := []zap.Field{
		zap.String("protocol", "lineproto"),
		zap.String("principal", principal),
		zap.String("command", cmd),
		zap.String("remote", c.nc.RemoteAddr().String()),
		zap.String("code", code),
	}
	if action != "" {
		fields = append(fields, zap.String("action", string(action)))
	}
	if topic != "" {
		fields = append(fields, zap.String("topic", topic))
	}
	if group != "" {
		fields = append(fields, zap.String("group", group))
	}
	if reason != nil {
		fields = append(fields, zap.String("reason", reason.Error()))
	}
	c.s.opts.AuditLogger.Info(msg, fields...)
}

// commandName is the command word of a request for the audit log: one of
// the protocol's words, or "unknown" — never the word itself, which might
// be a token sent without AUTH.
func commandName(cmd []byte) string {
	for _, w := range []string{"AUTH", "PUB", "PUBID", "PUBX", "FETCH", "ACK", "ACKX", "NACKX", "STATUS"} {
		if bytes.EqualFold(cmd, []byte(w)) {
			return w
		}
	}
	return "unknown"
}
