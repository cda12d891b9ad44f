// Package recovery runs startup recovery and owns readiness. When the
// application starts it opens every stored topic through the topic
// registry's OpenAll — each topic's log repairs a torn tail and refuses
// corruption (the original mmmq's startup recovery: scan the data root,
// make one TopicQueue per topic directory, trim each segment to its offset
// index) — and reports the broker ready (/readyz) only once every start
// hook has run. A topic refused as corrupt either stops startup
// (on-corruption: fail, the default) or is quarantined while the rest of
// the broker serves (on-corruption: quarantine).
package recovery

import (
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Readiness is the broker's "ready" flag (/readyz): false until recovery has
// finished and every module has started, false again once stopping begins.
// The zero value is not ready.
type Readiness struct{ ready atomic.Bool }

// Ready reports whether the broker is ready.
func (r *Readiness) Ready() bool { return r.ready.Load() }

// Set marks the broker ready or not.
func (r *Readiness) Set(v bool) { r.ready.Store(v) }

// Report sums up a startup recovery.
type Report = topicqueue.Report

// Run opens every stored topic of reg: reg.OpenAll(policy, log).
func Run(reg *topicqueue.Registry, policy config.OnCorruption, log *zap.Logger) (Report, error) {
	return reg.OpenAll(policy, log)
}
