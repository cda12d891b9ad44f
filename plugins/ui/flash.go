package ui

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// Flash messages: the one-line outcome of a form post, shown once on the
// page the post redirects to (Post/Redirect/Get). They stay on the server,
// keyed by a random id in the redirect's ?flash=, and only the session that
// made the post sees its own: a crafted link cannot put text of its
// choosing on an operator's page.
const (
	flashTTL = time.Minute // an unread flash is dropped after this
	maxFlash = 1024        // flashes kept at most (the oldest go first)
)

// flash is one outcome waiting to be shown.
type flash struct {
	text    string
	bad     bool
	session string
	at      time.Time
}

// flashes is the store; the zero value is ready.
type flashes struct {
	mu sync.Mutex
	m  map[string]flash
}

// put keeps text for session and returns its id (32 hex characters).
func (f *flashes) put(session, text string, bad bool, now time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]flash{}
	}
	oldestID, oldest := "", now
	for k, v := range f.m {
		if now.Sub(v.at) > flashTTL {
			delete(f.m, k)
		} else if v.at.Before(oldest) {
			oldestID, oldest = k, v.at
		}
	}
	if len(f.m) >= maxFlash {
		delete(f.m, oldestID)
	}
	f.m[id] = flash{text: text, bad: bad, session: session, at: now}
	return id
}

// take returns and forgets flash id if it is session's and fresh.
func (f *flashes) take(id, session string, now time.Time) (flash, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.m[id]
	if !ok || v.session != session || now.Sub(v.at) > flashTTL {
		return flash{}, false
	}
	delete(f.m, id)
	return v, true
}
