// Package retention deletes old messages: every check interval it applies
// each topic's retention policy (by age and by size, mmmq.broker.retention)
// through the storage engine, which deletes whole sealed segments from the
// head of the log, never the active one (storage.Log.ApplyRetention). The
// topic's log start offset then moves up; reading below it is 410
// OFFSET_EXPIRED, and dispatchers and consumer groups behind it continue
// from it (modules/dispatcher, modules/groups).
//
// With keep-unconsumed, a segment is kept while a dispatcher (from the
// file, Go code or the admin API: every dispatcher of the live set), or a
// consumer group that committed or fetched within group-idle (only groups
// used since the broker started count), has not read past it — the
// "retain unacknowledged messages" rule of Google Pub/Sub — and the reader
// furthest behind is reported as the topic's holder (RetentionHold). It
// works without Fx; fx.go wires it into the application.
package retention

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Rule is one per-pattern override (mmmq.broker.retention.topics): topics
// matching Pattern use Policy instead of the default.
type Rule struct {
	Pattern dispatcher.Pattern
	Policy  contract.RetentionPolicy
}

// GroupHolder says from which offset the consumer groups of a topic still
// need its data (*groups.Coordinator implements it).
type GroupHolder interface {
	// HoldingGroup is the lowest committed offset among the groups
	// opened, fetched or committed at or after since, and the name of the
	// group at it; false when there is none.
	HoldingGroup(topic string, since time.Time) (group string, offset int64, ok bool)
	// CheckpointError is the error of a group of topic that a consumer
	// tried to use at or after since and whose checkpoint could not be
	// read (opened), nil when there is none: such a group's position is
	// unknown, so the topic is kept whole.
	CheckpointError(topic string, since time.Time) error
}

// Options configures a Retainer. The zero value deletes nothing.
type Options struct {
	// Default is the policy of topics no rule matches
	// (mmmq.broker.retention.max-age and max-bytes).
	Default contract.RetentionPolicy
	// Rules are the overrides, first match wins.
	Rules []Rule
	// CheckInterval is how often Start's loop runs a pass; default 1m.
	CheckInterval time.Duration
	// KeepUnconsumed keeps what Dispatchers and Groups have not read.
	KeepUnconsumed bool
	// GroupIdle: a group that has neither fetched nor committed for longer
	// than this holds nothing; default 24h.
	GroupIdle time.Duration
	// Dispatchers are the broker's dispatchers, the admin API's included
	// (keep-unconsumed; the live set, read at every pass); nil for none.
	// Checkpoints of dispatchers not in the set hold nothing.
	Dispatchers *dispatcher.Set
	// Groups is the consumer-group coordinator (keep-unconsumed); nil for
	// none.
	Groups GroupHolder
	// Now is the clock; default time.Now. Tests drive age-based retention
	// with it instead of sleeping.
	Now func() time.Time
	// Logger; default zap.NewNop().
	Logger *zap.Logger
}

// OptionsFromConfig maps mmmq.broker.retention to Options (Dispatchers,
// Groups, Now and Logger are left to the caller). An invalid pattern
// fails, naming its key.
func OptionsFromConfig(c Config) (Options, error) {
	o := Options{
		Default:        contract.RetentionPolicy{MaxAge: c.MaxAge, MaxBytes: c.MaxBytes},
		CheckInterval:  c.CheckInterval,
		KeepUnconsumed: c.KeepUnconsumed,
		GroupIdle:      c.GroupIdle,
	}
	var errs []error
	for i, t := range c.Topics {
		p, err := dispatcher.ParsePattern(t.Pattern)
		if err != nil {
			errs = append(errs, fmt.Errorf("mmmq.broker.retention.topics[%d].pattern: %w", i, err))
			continue
		}
		// A limit the override leaves out is the broker-wide one.
		pol := o.Default
		if t.MaxAge != nil {
			pol.MaxAge = *t.MaxAge
		}
		if t.MaxBytes != nil {
			pol.MaxBytes = *t.MaxBytes
		}
		o.Rules = append(o.Rules, Rule{Pattern: p, Policy: pol})
	}
	return o, errors.Join(errs...)
}

// PolicyFor is the policy of topic: the first rule whose pattern reaches
// it under the reserved-prefix rule (contract.Pattern.Reaches), else the
// default; but a topic under a reserved prefix (dead-letter.*) that no
// rule names is kept whole: the default does not apply to it, only an
// override whose pattern starts with the prefix (dead-letter.**) does.
func (o Options) PolicyFor(topic string) contract.RetentionPolicy {
	for _, r := range o.Rules {
		if r.Pattern.Reaches(topic) {
			return r.Policy
		}
	}
	if contract.ReservedPrefix(topic) != "" {
		return contract.RetentionPolicy{}
	}
	return o.Default
}

// ReservedRules says, for each reserved prefix, which retention applies
// to the topics under it: "kept" when no override names the prefix, else
// the patterns of the overrides that do, in order (what startup logs).
func (o Options) ReservedRules() []zap.Field {
	var fs []zap.Field
	for _, prefix := range contract.ReservedPrefixes() {
		var named []string
		for _, r := range o.Rules {
			if r.Pattern.Names(prefix) {
				named = append(named, r.Pattern.String())
			}
		}
		what := "kept: max-age and max-bytes do not apply, no override names them"
		if len(named) > 0 {
			what = "the overrides " + strings.Join(named, ", ") + " where they match; the others kept"
		}
		fs = append(fs, zap.String("retention-of-"+prefix+"**", what))
	}
	return fs
}

// Result is what one pass did, summed over the topics.
type Result struct {
	Topics   int   // topics that lost at least one segment
	Segments int   // segments deleted
	Entries  int64 // messages deleted
	Bytes    int64 // bytes deleted (.mmm + .idx)
	Failed   int   // topics whose deletion failed (logged)
	// Unreadable: topics kept whole, their pass skipped, because a
	// reader's checkpoint could not be read (keep-unconsumed; logged).
	Unreadable int
}

// Retainer applies the retention policies to every open topic of a
// registry, once per Pass or every CheckInterval between Start and Stop.
type Retainer struct {
	reg  *topicqueue.Registry
	opts Options
	log  *zap.Logger

	mu     sync.Mutex // one pass at a time
	totals Result
	// cpErrs counts, per topic, the passes skipped because a reader's
	// checkpoint could not be read (CheckpointErrors). Guarded by mu.
	cpErrs map[string]uint64
	// warnedAt is, per topic under a reserved prefix, the power of two
	// its size last crossed with a warning (watchReserved). Guarded by mu.
	warnedAt map[string]int64
	// holds are, per topic, the reader that held its retention back at
	// the last pass (RetentionHold); replaced by every pass.
	holds atomic.Pointer[map[string]contract.RetentionHold]

	stop chan struct{}
	done chan struct{}
}

// New returns a Retainer over reg's topics.
func New(reg *topicqueue.Registry, opts Options) *Retainer {
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = time.Minute
	}
	if opts.GroupIdle <= 0 {
		opts.GroupIdle = 24 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Retainer{reg: reg, opts: opts, log: opts.Logger, cpErrs: map[string]uint64{}, warnedAt: map[string]int64{}}
}

// RetentionHold implements contract.RetentionHolds: the reader, the one
// furthest behind, that kept segments of topic the policy found due at the
// last pass (keep-unconsumed), and how many bytes; false when none did.
func (r *Retainer) RetentionHold(topic string) (contract.RetentionHold, bool) {
	if m := r.holds.Load(); m != nil {
		h, ok := (*m)[topic]
		return h, ok
	}
	return contract.RetentionHold{}, false
}

// Holds returns RetentionHold of every held topic, by topic (a copy; for
// metrics).
func (r *Retainer) Holds() map[string]contract.RetentionHold {
	if m := r.holds.Load(); m != nil {
		return maps.Clone(*m)
	}
	return nil
}

// Enabled reports whether any policy can delete anything; a Retainer that
// is not enabled starts no loop.
func (r *Retainer) Enabled() bool {
	if r.opts.Default.Enabled() {
		return true
	}
	for _, rule := range r.opts.Rules {
		if rule.Policy.Enabled() {
			return true
		}
	}
	return false
}

// Totals is the sum of every pass so far (for metrics).
func (r *Retainer) Totals() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.totals
}

// CheckpointErrors returns, per topic name, how many passes kept the topic
// whole because the checkpoint of a dispatcher or consumer group reading
// it could not be read (keep-unconsumed), since the Retainer was made
// (mmmq_retention_checkpoint_errors_total{topic}). Topics that never had
// one are absent. The map is a copy.
func (r *Retainer) CheckpointErrors() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.cpErrs)
}

// Pass applies the policies to every open topic now. A topic whose
// deletion fails is logged and counted in Result.Failed; the others go on.
// With keep-unconsumed, a topic one of whose readers' checkpoints cannot
// be read is left alone for this pass (nothing of it is deleted, not even
// a deletion left unfinished by an earlier error): logged, counted in
// Result.Unreadable and in CheckpointErrors.
func (r *Retainer) Pass() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.opts.Now()
	var res Result
	holds := map[string]contract.RetentionHold{}
	defer r.holds.Store(&holds)
	for _, q := range r.reg.List() {
		p := r.opts.PolicyFor(q.Name())
		if contract.ReservedPrefix(q.Name()) != "" {
			r.watchReserved(q, p)
		}
		if !p.Enabled() {
			continue
		}
		lg, ok := q.Log().(contract.Retainer)
		if !ok {
			continue
		}
		keep, holder := contract.KeepAll, contract.RetentionHold{}
		if r.opts.KeepUnconsumed {
			var err error
			if holder, err = r.keepFrom(q, now); err != nil {
				res.Unreadable++
				r.cpErrs[q.Name()]++
				r.log.Error("retention: cannot read a reader's checkpoint; keeping the topic whole (retried at the next check)",
					zap.String("topic", q.Name()), zap.Error(err))
				continue
			}
			if holder.Kind != "" {
				keep = holder.Committed
			}
		}
		tr, err := lg.ApplyRetention(p, now, keep)
		if tr.HeldBytes > 0 && holder.Kind != "" {
			holder.HeldBytes = tr.HeldBytes
			holds[q.Name()] = holder
		}
		if tr.Segments > 0 {
			res.Topics++
			res.Segments += tr.Segments
			res.Entries += tr.Entries
			res.Bytes += tr.Bytes
		}
		if err != nil && !errors.Is(err, contract.ErrClosed) {
			res.Failed++
			r.log.Error("retention failed; the topic keeps its data and is retried at the next check",
				zap.String("topic", q.Name()), zap.Error(err))
		}
	}
	r.totals.Topics += res.Topics
	r.totals.Segments += res.Segments
	r.totals.Entries += res.Entries
	r.totals.Bytes += res.Bytes
	r.totals.Failed += res.Failed
	r.totals.Unreadable += res.Unreadable
	return res
}

// WarnFromBytes is the smallest size of a dead-letter topic (a topic
// under a reserved prefix) that a pass warns about; it warns again at
// every power of two above it.
const WarnFromBytes = 1 << 20

// watchReserved warns when q, a topic under a reserved prefix, has grown
// past the next power of two (WarnFromBytes at least) since its last
// warning: such topics are kept by default, so their size only grows
// until someone redrives, deletes or gives them an override. r.mu is held.
func (r *Retainer) watchReserved(q *topicqueue.TopicQueue, p contract.RetentionPolicy) {
	size := q.Stats().Bytes
	mark := int64(0)
	if size >= WarnFromBytes {
		mark = 1 << (bits.Len64(uint64(size)) - 1) // the power of two at or below size
	}
	was, seen := r.warnedAt[q.Name()]
	r.warnedAt[q.Name()] = mark
	if mark == 0 || (seen && mark <= was) {
		return
	}
	kept := "kept whole (no retention override names it)"
	if p.Enabled() {
		kept = "under a retention override"
	}
	r.log.Warn("dead-letter topic growing: redrive or delete what it holds, or give it a retention override",
		zap.String("topic", q.Name()), zap.Int64("bytes", size), zap.Int64("crossed-bytes", mark),
		zap.Int64("messages", q.HighWatermark()-q.StartOffset()), zap.String("retention", kept))
}

// keepFrom is the reader of q furthest behind: the dispatcher (any of the
// set, API-created ones too) or recently active consumer group with the
// lowest committed offset, from which q's data must be kept (a zero Kind
// when none holds anything; on a tie the dispatcher, first by name). The
// error, when a dispatcher's checkpoint cannot be read or a recently used
// group's could not be, names the reader: its progress is unknown, and
// the caller keeps everything rather than guess.
func (r *Retainer) keepFrom(q *topicqueue.TopicQueue, now time.Time) (contract.RetentionHold, error) {
	var h contract.RetentionHold
	if r.opts.Dispatchers != nil {
		for _, d := range r.opts.Dispatchers.Matching(q.Name()) {
			cp, err := q.Checkpoint(d.Name())
			if err != nil {
				return h, fmt.Errorf("dispatcher %s: %w", d.Name(), err)
			}
			if h.Kind == "" || cp.Offset() < h.Committed {
				h = contract.RetentionHold{Kind: "dispatcher", Name: d.Name(), Committed: cp.Offset()}
			}
		}
	}
	if g := r.opts.Groups; g != nil {
		since := now.Add(-r.opts.GroupIdle)
		if err := g.CheckpointError(q.Name(), since); err != nil {
			return h, fmt.Errorf("consumer group: %w", err)
		}
		if name, off, ok := g.HoldingGroup(q.Name(), since); ok && (h.Kind == "" || off < h.Committed) {
			h = contract.RetentionHold{Kind: "group", Name: name, Committed: off}
		}
	}
	return h, nil
}

// Start launches the loop that runs a pass every CheckInterval (none when
// no policy is enabled). It returns at once.
func (r *Retainer) Start() {
	if !r.Enabled() || r.stop != nil {
		return
	}
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	r.log.Info("retention started", append([]zap.Field{zap.Duration("check-interval", r.opts.CheckInterval),
		zap.Duration("max-age", r.opts.Default.MaxAge), zap.Int64("max-bytes", r.opts.Default.MaxBytes),
		zap.Int("rules", len(r.opts.Rules)), zap.Bool("keep-unconsumed", r.opts.KeepUnconsumed)}, r.opts.ReservedRules()...)...)
	go func() {
		defer close(r.done)
		t := time.NewTicker(r.opts.CheckInterval)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
				r.Pass()
			}
		}
	}()
}

// Stop ends the loop and waits for a pass in progress to finish.
func (r *Retainer) Stop() {
	if r.stop == nil {
		return
	}
	close(r.stop)
	<-r.done
	r.stop = nil
}
