// Package auth is the broker's authentication and authorization: the
// token entries of mmmq.auth.tokens as a contract.Authenticator (Store),
// per-principal limits as a contract.Limiter (Limiter), and `mmmq token
// new`'s token maker (NewToken). The HTTP server and the line protocol
// enforce them; see the README's "Security" section.
//
// A token itself is never stored, logged or put in an error: the Store
// keeps SHA-256 digests (read from token-sha256, or computed from a
// token-file's content when the file is read) and compares the digest of a
// presented token with every stored one in constant time.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// PollInterval is how often token files are checked for changes (size and
// modification time).
const PollInterval = 2 * time.Second

// Source returns the current mmmq.auth section for a reload: ok is false
// when there is nothing to re-read (the configuration was not loaded from
// a file), and the Store then keeps its list and only re-reads token files.
type Source func() (a Config, ok bool, err error)

// Store is the token entries of mmmq.auth.tokens: a contract.Authenticator
// and a contract.Reloader ("auth tokens"). Safe for concurrent use; a
// reload swaps the whole state at once, so a request sees the old or the
// new entries, never a mix.
type Store struct {
	log    *zap.Logger
	source Source

	mu  sync.Mutex // serialises reloads; guards cfg and badFiles
	cfg Config
	// badFiles is the token files' stamps when they last failed to load,
	// so that a broken file is reported once, not every poll.
	badFiles string
	cur      atomic.Pointer[state]

	stop chan struct{}
	done chan struct{}
}

// state is one immutable generation of the entries.
type state struct {
	// principals are every entry's, in the configuration's order.
	principals []*principal
	tokens     []tokenEntry
	certs      map[string]*principal // client-cn → principal
	open       bool                  // no entries: authentication off
	// protectMetrics is mmmq.auth.protect-metrics.
	protectMetrics bool
	// files are the token files read, with what they looked like.
	files map[string]fileStamp
}

type tokenEntry struct {
	digest [sha256.Size]byte
	p      *principal
}

type fileStamp struct {
	size int64
	mod  time.Time
}

// New builds the store from a (validated) mmmq.auth section, reading the
// token files; an unreadable or empty token file is an error naming its
// key. source (may be nil) is what Reload re-reads; nil log discards logs.
func New(a Config, source Source, log *zap.Logger) (*Store, error) {
	if log == nil {
		log = zap.NewNop()
	}
	s := &Store{log: log, source: source, cfg: a.Clone()}
	st, err := build(s.cfg)
	if err != nil {
		return nil, err
	}
	s.cur.Store(st)
	if st.open {
		log.Info("authentication off: no mmmq.auth.tokens; every request is allowed")
	} else {
		log.Info("authentication on", zap.Int("entries", len(a.Tokens)))
		warnReservedLosses(log, st)
		warnNoPermissions(log, a)
	}
	return s, nil
}

// warnReservedLosses logs one warning per entry whose permissions reached
// dead-letter topics (a reserved prefix) before the reserved-topic rule and
// do not now: "**" no longer covers them (see the README's "Reserved
// topics and dead letters").
func warnReservedLosses(log *zap.Logger, st *state) {
	for _, p := range st.principals {
		if lost := p.reservedLosses(); len(lost) > 0 {
			log.Warn("token no longer reaches reserved topics: patterns such as \"**\" do not cover dead-letter.* topics; add \"dead-letter.**\" to its topics to keep that access",
				zap.String("token", p.name), zap.Strings("lost", lost))
		}
	}
}

// warnNoPermissions logs one warning per entry without permissions
// (`permissions: []` or none): valid, but every request it makes is
// refused with 403, which is rarely what was meant.
func warnNoPermissions(log *zap.Logger, a Config) {
	for i, t := range a.Tokens {
		if len(t.Permissions) == 0 {
			log.Warn("token has no permissions: every request it makes is refused (403); give it permissions or remove it",
				zap.String("token", t.Name), zap.String("key", fmt.Sprintf("mmmq.auth.tokens[%d].permissions", i)))
		}
	}
}

// build reads a into a state.
func build(a Config) (*state, error) {
	st := &state{certs: map[string]*principal{}, files: map[string]fileStamp{}, open: len(a.Tokens) == 0, protectMetrics: a.ProtectMetrics}
	owner := map[[sha256.Size]byte]string{} // digest -> the key that holds it
	add := func(key string, e tokenEntry) error {
		if prev, dup := owner[e.digest]; dup {
			// Two entries with one token could not be told apart: the
			// token would silently become whichever matched last.
			return fmt.Errorf("config: %s: the same token as %s (a token file holding another entry's token?); every entry needs its own token", key, prev)
		}
		owner[e.digest] = key
		st.tokens = append(st.tokens, e)
		return nil
	}
	for i, t := range a.Tokens {
		key := fmt.Sprintf("mmmq.auth.tokens[%d]", i)
		p, err := newPrincipal(key, t)
		if err != nil {
			return nil, err
		}
		st.principals = append(st.principals, p)
		switch {
		case t.ClientCN != "":
			st.certs[t.ClientCN] = p
		case t.TokenFile != "":
			d, stamp, err := readTokenFile(t.TokenFile)
			if err != nil {
				return nil, fmt.Errorf("config: %s.token-file: %w", key, err)
			}
			st.files[t.TokenFile] = stamp
			if err := add(key+".token-file", tokenEntry{digest: d, p: p}); err != nil {
				return nil, err
			}
		default:
			b, err := hex.DecodeString(t.TokenSHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("config: %s.token-sha256: not 64 hex characters", key)
			}
			e := tokenEntry{p: p}
			copy(e.digest[:], b)
			if err := add(key+".token-sha256", e); err != nil {
				return nil, err
			}
		}
	}
	return st, nil
}

// readTokenFile returns the digest of the token in path (whitespace around
// it trimmed); the token itself goes no further, and errors never hold it.
func readTokenFile(path string) ([sha256.Size]byte, fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return [sha256.Size]byte{}, fileStamp{}, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return [sha256.Size]byte{}, fileStamp{}, err
	}
	tok := strings.TrimSpace(string(b))
	clear(b)
	switch {
	case tok == "":
		return [sha256.Size]byte{}, fileStamp{}, fmt.Errorf("%s holds no token (empty or only whitespace)", path)
	case strings.ContainsAny(tok, " \t\r\n"):
		return [sha256.Size]byte{}, fileStamp{}, fmt.Errorf("%s holds more than one word; it must hold one token", path)
	}
	return sha256.Sum256([]byte(tok)), fileStamp{size: fi.Size(), mod: fi.ModTime()}, nil
}

// Enabled reports whether at least one token entry is configured.
func (s *Store) Enabled() bool { return !s.cur.Load().open }

// ProtectMetrics is mmmq.auth.protect-metrics as last loaded.
func (s *Store) ProtectMetrics() bool { return s.cur.Load().protectMetrics }

// Authenticate returns the principal whose digest is token's SHA-256, or
// contract.ErrUnauthorized. The digest is compared with every stored one
// with subtle.ConstantTimeCompare, whatever matched, so the time taken
// does not depend on which entry (if any) matched.
func (s *Store) Authenticate(token string) (contract.Principal, error) {
	st := s.cur.Load()
	if st.open || token == "" {
		return nil, contract.ErrUnauthorized
	}
	sum := sha256.Sum256([]byte(token))
	var found *principal
	for i := range st.tokens {
		if subtle.ConstantTimeCompare(sum[:], st.tokens[i].digest[:]) == 1 {
			found = st.tokens[i].p
		}
	}
	if found == nil {
		return nil, contract.ErrUnauthorized
	}
	return found, nil
}

// AuthenticateCert returns the principal of the entry whose client-cn is
// commonName, or contract.ErrUnauthorized.
func (s *Store) AuthenticateCert(commonName string) (contract.Principal, error) {
	st := s.cur.Load()
	if p, ok := st.certs[commonName]; ok && commonName != "" {
		return p, nil
	}
	return nil, contract.ErrUnauthorized
}

// Name is the contract.Reloader name.
func (s *Store) Name() string { return "auth tokens" }

// Reload re-reads the token list (through the Source, when it has one:
// the configuration file) and every token file. On error the previous
// entries stay in force.
func (s *Store) Reload(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.cfg
	if s.source != nil {
		fresh, ok, err := s.source()
		if err != nil {
			return fmt.Errorf("re-read mmmq.auth: %w", err)
		}
		if ok {
			a = fresh.Clone()
		}
	}
	return s.apply(a)
}

// apply builds a and, if that works, makes it current; s.mu is held.
func (s *Store) apply(a Config) error {
	st, err := build(a)
	if err != nil {
		return err
	}
	s.cfg = a
	prev := s.cur.Swap(st)
	if st.open && prev != nil && !prev.open {
		// A reload that leaves no token turns authentication off: anyone
		// who reaches the port may do anything again. Say so loudly.
		s.log.Warn("auth tokens loaded: none left, authentication is OFF; every request is allowed")
		return nil
	}
	s.log.Info("auth tokens loaded", zap.Int("entries", len(a.Tokens)), zap.Bool("enabled", !st.open))
	return nil
}

// filesChanged reports whether a token file's size or modification time
// differs from when it was read (or it cannot be examined), and what the
// files look like now.
func (s *Store) filesChanged() (changed bool, now string) {
	var b strings.Builder
	for path, was := range s.cur.Load().files {
		fi, err := os.Stat(path)
		if err != nil {
			fmt.Fprintf(&b, "%s:%v;", path, err)
			changed = true
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%d;", path, fi.Size(), fi.ModTime().UnixNano())
		changed = changed || fi.Size() != was.size || !fi.ModTime().Equal(was.mod)
	}
	return changed, b.String()
}

// Poll re-reads the token files (not the list) when one changed. Start
// calls it every PollInterval; on error the previous entries stay, and the
// error is logged once per change of the files.
func (s *Store) Poll() {
	changed, now := s.filesChanged()
	if !changed {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now == s.badFiles {
		return // already reported; wait for the next change
	}
	if err := s.apply(s.cfg); err != nil {
		s.badFiles = now
		s.log.Error("a token file changed but could not be read; the previous tokens stay in force", zap.Error(err))
		return
	}
	s.badFiles = ""
}

// Start polls the token files every PollInterval until Stop.
func (s *Store) Start(context.Context) error {
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(PollInterval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.Poll()
			}
		}
	}()
	return nil
}

// Stop ends the polling.
func (s *Store) Stop(context.Context) error {
	if s.stop != nil {
		close(s.stop)
		<-s.done
		s.stop = nil
	}
	return nil
}
