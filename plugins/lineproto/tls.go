package lineproto

import (
	"context"
	"crypto/tls"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// serveConn serves c, after its TLS handshake when the server has TLS on.
// The handshake is bounded by Options.HandshakeTimeout and ends at Stop;
// a connection whose handshake fails is closed unanswered (it cannot read
// an answer) and gives its slot back.
func (s *Server) serveConn(c *conn) {
	if tc, ok := c.nc.(*tls.Conn); ok {
		if err := s.handshake(tc); err != nil {
			c.log.Debug("tls handshake failed; connection closed", zap.Error(err))
			_ = c.nc.Close()
			s.remove(c)
			s.wg.Done()
			return
		}
	}
	c.serve()
}

// handshake runs tc's handshake within HandshakeTimeout (or until Stop).
func (s *Server) handshake(tc *tls.Conn) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.HandshakeTimeout)
	defer cancel()
	_ = tc.SetDeadline(time.Now().Add(s.opts.HandshakeTimeout))
	err := tc.HandshakeContext(ctx)
	_ = tc.SetDeadline(time.Time{})
	return err
}

// Reloaders are the server's members of the reloaders value group: its TLS
// certificates when TLS is on, else none (none for a nil Server, the one
// NewFromConfig returns when the listener is off).
func (s *Server) Reloaders() []contract.Reloader {
	if s == nil || s.opts.TLS == nil {
		return nil
	}
	return []contract.Reloader{s.opts.TLS}
}
