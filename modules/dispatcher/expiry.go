package dispatcher

import (
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// Expired messages.
//
// A message published with a ttl carries "expiresAt" (Unix ms) in its
// stored JSON. A worker compares it with its clock when the message is
// about to be pushed (launchReady: its first send and every resend): a
// message at or past its expiresAt is not pushed, it is finished as
// expired instead, in its place, so the checkpoint moves over it as over
// an ACKed one (and under OrderKey its key's next message becomes the
// head). The dispatcher's expired setting says what finishing means:
// ExpiredSkip (the default) drops it, counted; ExpiredDeadLetter appends
// it to the dead-letter topic first, with HeaderDLReason ReasonExpired.
// The message stays in the log for every other reader.

// ExpiredAction is what a dispatcher does with an expired message (its
// expired key).
type ExpiredAction string

const (
	// ExpiredSkip finishes an expired message without a push: counted,
	// logged at debug level, not delivered. The default.
	ExpiredSkip ExpiredAction = "skip"
	// ExpiredDeadLetter appends an expired message to the dead-letter
	// topic (HeaderDLReason ReasonExpired, no expiresAt of its own) before
	// the checkpoint moves past it; it needs dead letters on.
	ExpiredDeadLetter ExpiredAction = "dead-letter"
)

// WithExpired returns a copy of d handling expired messages per a ("" is
// ExpiredSkip).
func (d *Dispatcher) WithExpired(a ExpiredAction) *Dispatcher {
	c := *d
	c.dl.expired = a
	return &c
}

// Expired is ExpiredSkip (default) or ExpiredDeadLetter.
func (d *Dispatcher) Expired() ExpiredAction {
	if d.dl.expired == "" {
		return ExpiredSkip
	}
	return d.dl.expired
}

// validateExpired reports the problems of the expired setting.
func (d *Dispatcher) validateExpired() []error {
	switch d.dl.expired {
	case "", ExpiredSkip:
	case ExpiredDeadLetter:
		if d.DeadLetter() == "" {
			return []error{fieldProblem{"expired", fmt.Sprintf("%q needs a dead-letter topic, but dead-letter is off (\"\"): set dead-letter, or expired to %q", ExpiredDeadLetter, ExpiredSkip)}}
		}
	default:
		return []error{fieldProblem{"expired", fmt.Sprintf("must be %q or %q; got %q", ExpiredSkip, ExpiredDeadLetter, d.dl.expired)}}
	}
	return nil
}

// expiresAt is m's stored expiresAt (0: none), read from its payload the
// first time it is asked for; ok is false while m's payload is not loaded
// (OrderKey: a message that waited behind its key is read again first).
func (m *msg) expiresAt() (exp int64, ok bool) {
	if m.unloaded || m.e.Payload == nil && !m.expRead {
		return 0, false
	}
	if !m.expRead {
		m.exp, m.expRead = contract.MessageExpiresAt(m.e.Payload), true
	}
	return m.exp, true
}

// expireReady finishes the expired messages among the first ones of
// ready (as many as the next push may take), in their place: they are
// never pushed. Under OrderKey finishing one may make its key's next
// message ready (unloaded: it is checked once loadReady read it).
//
// It reports whether it finished any.
func (w *worker) expireReady(now time.Time) (expired bool, err error) {
	n := max(w.batch.MaxMessages, 1)
	for i := 0; i < len(w.ready) && i < n; i++ {
		m := w.ready[i]
		exp, ok := m.expiresAt()
		if !ok || !contract.Expired(exp, now) {
			continue
		}
		w.ready = slices.Delete(w.ready, i, i+1)
		i--
		if err := w.expire(m, exp, now); err != nil {
			return true, err
		}
		expired = true
	}
	if expired && w.kw == nil {
		// The head may have been a message waiting out a backoff (its
		// resend is what found it expired): once no message left waits to
		// be sent again, the worker is not backing off any more (its
		// status and mmmq_dispatch_backoff say so), and the head shown is
		// the next one. Under OrderKey only keys wait (keyorder.go).
		w.showHead()
		if !slices.ContainsFunc(w.ready, func(m *msg) bool { return m.attempts > 0 }) {
			w.backingOff.Store(false)
		}
	}
	return expired, nil
}

// expire finishes m, expired at exp, per the dispatcher's expired
// setting. With ExpiredDeadLetter a stop during the dead-letter retries
// leaves m unfinished (expired again after the restart).
func (w *worker) expire(m *msg, exp int64, now time.Time) error {
	if w.d.Expired() == ExpiredDeadLetter {
		if err := w.exhaust(m, ReasonExpired); err != nil {
			return err
		}
	} else {
		w.log.Debug("message expired; it is not delivered", zap.Int64("offset", m.e.Offset),
			zap.Int64("expires-at", exp), zap.Duration("expired-for", now.Sub(time.UnixMilli(exp))))
		w.finish(m)
	}
	if m.done {
		w.ttlExpired.Add(1)
		w.m.ttlExpired.Add(1)
	}
	return nil
}

// MessagesExpired is the number of messages dispatchers finished as
// expired (past their expiresAt: skipped or dead-lettered, never pushed),
// over every worker since the Manager was made
// (mmmq_messages_expired_total{kind="dispatcher"}).
func (m *Manager) MessagesExpired() uint64 { return m.ttlExpired.Load() }
