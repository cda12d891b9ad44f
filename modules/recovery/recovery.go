// Package recovery opens every topic found under the data root at startup
// (seed 000 "시작 복구"): each topic directory runs the storage engine's
// index-based recovery and is registered with the topic registry. A topic
// refused as corrupt either stops startup (on-corruption: fail, the default)
// or is quarantined while the rest of the broker serves (on-corruption:
// quarantine). Readiness is reported only after this has finished.
package recovery

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Policy is what to do with a topic refused as corrupt: the value of
// mmmq.broker.storage.on-corruption. It is an alias of config.OnCorruption,
// which owns this enum.
//
// Deprecated: use config.OnCorruption.
type Policy = config.OnCorruption

// Policies (mmmq.broker.storage.on-corruption).
const (
	// Fail stops startup (the default).
	//
	// Deprecated: use config.OnCorruptionFail.
	Fail = config.OnCorruptionFail
	// Quarantine excludes the topic and serves the rest.
	//
	// Deprecated: use config.OnCorruptionQuarantine.
	Quarantine = config.OnCorruptionQuarantine
)

// Readiness is the broker's "ready" flag (/readyz): false until recovery has
// finished. The zero value is not ready.
type Readiness struct{ ready atomic.Bool }

// Ready reports whether startup recovery has finished.
func (r *Readiness) Ready() bool { return r.ready.Load() }

// Set marks the broker ready or not.
func (r *Readiness) Set(v bool) { r.ready.Store(v) }

// Report sums up a startup recovery.
type Report struct {
	Topics      int                      // topics opened
	Changed     []storage.RecoveryReport // topics whose tail was cut or truncated
	Quarantined map[string]error         // topics refused and excluded
	Skipped     []string                 // directories that are not topics
	Took        time.Duration
}

// Run opens every topic directory under reg's root. It returns an error when
// a topic is corrupt and policy is config.OnCorruptionFail (the error names the topic, file,
// position and offset), or on an I/O error.
func Run(reg *topicqueue.Registry, policy config.OnCorruption, log *zap.Logger) (Report, error) {
	start := time.Now()
	rep := Report{Quarantined: map[string]error{}}
	fsys := reg.FS()
	if err := storage.MkdirDurable(fsys, reg.Root()); err != nil {
		return rep, err
	}
	ents, err := fsys.List(reg.Root())
	if err != nil {
		return rep, fmt.Errorf("list data root %s: %w", reg.Root(), err)
	}
	for _, e := range ents {
		if !e.IsDir {
			continue
		}
		if err := topicqueue.ValidateName(e.Name); err != nil {
			rep.Skipped = append(rep.Skipped, e.Name)
			log.Warn("skipping directory that is not a topic", zap.String("name", e.Name), zap.Error(err))
			continue
		}
		q, err := reg.Open(e.Name)
		var ce *storage.CorruptionError
		switch {
		case errors.As(err, &ce):
			log.Error("topic refused: corruption found by startup recovery; files left untouched",
				zap.String("topic", ce.Topic), zap.String("file", ce.File), zap.Int64("pos", ce.Pos),
				zap.Int64("offset", ce.Offset), zap.String("reason", ce.Reason), zap.String("policy", string(policy)))
			if policy != config.OnCorruptionQuarantine {
				return rep, fmt.Errorf("recovery: %w (run `mmmq verify` for a full report; set mmmq.broker.storage.on-corruption: quarantine to serve the other topics)", ce)
			}
			reg.Quarantine(e.Name, ce)
			rep.Quarantined[e.Name] = ce
			continue
		case err != nil:
			return rep, fmt.Errorf("recovery: open topic %s: %w", e.Name, err)
		}
		rep.Topics++
		if rr := q.Log().Recovery(); !rr.Clean() {
			rep.Changed = append(rep.Changed, rr)
		}
	}
	rep.Took = time.Since(start)
	log.Info("startup recovery finished", zap.Int("topics", rep.Topics), zap.Int("changed", len(rep.Changed)),
		zap.Int("quarantined", len(rep.Quarantined)), zap.Duration("took", rep.Took))
	return rep, nil
}
