// Package reload re-reads the broker's files on SIGHUP: every
// contract.Reloader in the `group:"reloaders"` value group (token lists and
// token files, TLS certificates) is asked to reload, in name order, without
// a restart and without dropping connections.
//
// Go's default action for SIGHUP ends the process; an application that
// includes this module (app.New does) handles the signal instead, so a
// custom binary gets the same behaviour by listing the module.
package reload

import (
	"context"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// Reloader calls every member of a set of contract.Reloaders, on SIGHUP
// once started, or on demand with All.
type Reloader struct {
	rs  []contract.Reloader
	log *zap.Logger

	mu   sync.Mutex // serialises reloads
	sig  chan os.Signal
	done chan struct{}
}

// New returns a Reloader over rs (nil members are ignored), sorted by
// name. A nil log discards logs.
func New(rs []contract.Reloader, log *zap.Logger) *Reloader {
	if log == nil {
		log = zap.NewNop()
	}
	out := make([]contract.Reloader, 0, len(rs))
	for _, r := range rs {
		if r != nil {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return &Reloader{rs: out, log: log}
}

// All reloads every member in turn and returns how many failed; each
// failure is logged at error level (the member keeps its old state), each
// success at info level.
func (r *Reloader) All(ctx context.Context) (failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.rs {
		if err := m.Reload(ctx); err != nil {
			failed++
			r.log.Error("reload failed; the previous state stays in force", zap.String("what", m.Name()), zap.Error(err))
			continue
		}
		r.log.Info("reloaded", zap.String("what", m.Name()))
	}
	return failed
}

// Start listens for SIGHUP and reloads on each one. It only starts a
// goroutine.
func (r *Reloader) Start(context.Context) error {
	r.sig = make(chan os.Signal, 1)
	r.done = make(chan struct{})
	signal.Notify(r.sig, syscall.SIGHUP)
	go func() {
		defer close(r.done)
		for range r.sig {
			r.log.Info("SIGHUP: reloading", zap.Int("reloaders", len(r.rs)))
			r.All(context.Background())
		}
	}()
	return nil
}

// Stop stops listening for SIGHUP (the signal's default action, ending
// the process, applies again) and waits for a reload in progress.
func (r *Reloader) Stop(context.Context) error {
	if r.sig == nil {
		return nil
	}
	signal.Stop(r.sig)
	close(r.sig)
	<-r.done
	return nil
}
