package dispatcher

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// Errors of the live changes.
var (
	// ErrUnknownDispatcher: no dispatcher has that name (404 NOT_FOUND).
	ErrUnknownDispatcher = contract.NewError(contract.CodeNotFound, "dispatcher: unknown dispatcher")
	// ErrDispatcherExists: Add of a name the set already has (409 NAME_TAKEN).
	ErrDispatcherExists = contract.NewError(contract.CodeNameTaken, "dispatcher: a dispatcher of that name exists")
)

// Live changes. A change takes effect at once: the workers of a dispatcher
// being replaced, paused, sought or removed are stopped first (an attempt
// in flight is abandoned and its message delivered again later, so
// at-least-once holds; finished messages are committed before the worker
// ends), then the new workers start on every open topic the dispatcher
// matches. Changes are serialised.

// Add starts delivering d, a dispatcher whose name is not in the set: it
// joins the set and gets a worker on every open topic it matches (none
// while paused). Errors: d's Validate error, ErrDispatcherExists.
func (m *Manager) Add(d *Dispatcher) error { return m.add(d, false, true) }

// AddPaused is Add for a dispatcher that starts paused: no worker runs,
// so nothing is delivered, until Resume.
func (m *Manager) AddPaused(d *Dispatcher) error { return m.add(d, true, true) }

// Restore is Add for a dispatcher created before (loaded from
// dispatchers.json at startup): its start position was decided when it was
// created, so a topic it has no checkpoint on is one created since, and
// is delivered from its start.
func (m *Manager) Restore(d *Dispatcher, paused bool) error { return m.add(d, paused, false) }

// add joins d to the set and starts its workers (none while paused);
// fresh says d is being created now (start "latest" then applies).
func (m *Manager) add(d *Dispatcher, paused, fresh bool) error {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	if _, ok := m.set.Get(d.name); ok {
		return fmt.Errorf("%w: %s", ErrDispatcherExists, d.name)
	}
	if err := d.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	if paused {
		m.paused[d.name] = true
		m.pauseInfo[d.name] = PauseInfo{Reason: PauseAdmin, At: time.Now()}
	} else {
		delete(m.paused, d.name)
		delete(m.pauseInfo, d.name)
	}
	m.mu.Unlock()
	if fresh && d.Start() == StartLatest {
		// d is created now: it begins at the high watermark of the topics
		// that exist, decided here, once, in its checkpoints.
		if err := m.markLatest(d, m.openTopics()); err != nil {
			return err
		}
	}
	if _, err := m.set.Put(d); err != nil {
		return err
	}
	m.startFor(d)
	m.log.Info("dispatcher added", zap.String("dispatcher", d.String()))
	m.warnInsecureIfStarted(d)
	return nil
}

// Replace swaps the dispatcher of d's name for d: the old one's workers
// stop, then d's start (a pattern change stops the workers of topics no
// longer matched and starts workers for newly matched ones). Its
// checkpoints, and whether it is paused, are kept. Errors: d's Validate
// error, ErrUnknownDispatcher.
func (m *Manager) Replace(d *Dispatcher) error {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	old, ok := m.set.Get(d.name)
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownDispatcher, d.name)
	}
	if err := d.Validate(); err != nil {
		return err
	}
	release := m.hold(d.name)
	defer release() // whatever happens, the dispatcher in the set runs again
	if _, err := m.set.Put(d); err != nil {
		return err
	}
	if d.Start() == StartLatest {
		// Topics the pattern change newly matches begin at their high
		// watermark too; those the old patterns matched keep their
		// checkpoints, or have none yet because they were created while
		// it was paused (delivered from their start).
		var added []Topic
		for _, t := range m.openTopics() {
			if !old.Matches(t.Name()) {
				added = append(added, t)
			}
		}
		if err := m.markLatest(d, added); err != nil {
			_, _ = m.set.Put(old) // refused: the old one runs again
			return err
		}
	}
	m.log.Info("dispatcher replaced", zap.String("dispatcher", d.String()))
	m.warnInsecureIfStarted(d)
	return nil
}

// hold stops the workers of the dispatcher named name and keeps any from
// starting (onTopic, a worker's end) until the returned release, which
// starts the workers of the dispatcher then in the set (none when it was
// removed or is paused). Used while a live change is applied.
func (m *Manager) hold(name string) (release func()) {
	m.mu.Lock()
	m.held[name] = true
	m.mu.Unlock()
	m.stopWorkers(func(k workerKey) bool { return k.dispatcher == name })
	return func() {
		m.mu.Lock()
		delete(m.held, name)
		m.mu.Unlock()
		if d, ok := m.set.Get(name); ok {
			m.startFor(d)
		}
	}
}

// Remove stops the workers of the dispatcher named name and takes it out
// of the set; it returns the removed dispatcher. Its checkpoints stay on
// disk (a dispatcher created again under that name resumes from them).
// Error: ErrUnknownDispatcher.
func (m *Manager) Remove(name string) (*Dispatcher, error) {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	d, ok := m.set.Get(name)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownDispatcher, name)
	}
	release := m.hold(name)
	m.set.Remove(name)
	release() // starts nothing: it is no longer in the set
	m.mu.Lock()
	m.cancelAutoPauseLocked(name, false)
	delete(m.paused, name)
	delete(m.limiters, name)
	delete(m.breakers, name)
	delete(m.limits, name)
	delete(m.health, name)
	delete(m.pauseInfo, name)
	for k := range m.replays {
		if k.dispatcher == name {
			delete(m.replays, k)
		}
	}
	m.mu.Unlock()
	m.log.Info("dispatcher removed", zap.String("dispatcher", name))
	return d, nil
}

// Pause stops delivering for the dispatcher named name until Resume: its
// workers stop (finished messages committed) and none start for new
// topics. It cancels a pending automatic pause (this one applies instead).
// Pausing a paused dispatcher does nothing. Error: ErrUnknownDispatcher.
func (m *Manager) Pause(name string) error {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	if _, ok := m.set.Get(name); !ok {
		return fmt.Errorf("%w: %s", ErrUnknownDispatcher, name)
	}
	m.mu.Lock()
	m.cancelAutoPauseLocked(name, false)
	if !m.paused[name] {
		m.pauseInfo[name] = PauseInfo{Reason: PauseAdmin, At: time.Now()}
	}
	m.paused[name] = true
	m.mu.Unlock()
	m.stopWorkers(func(k workerKey) bool { return k.dispatcher == name })
	m.log.Info("dispatcher paused", zap.String("dispatcher", name))
	return nil
}

// Resume restarts delivery for a paused dispatcher, from its checkpoints,
// at once: its circuit breaker starts closed again (no cool-off left from
// before the pause is waited out; breaker-failures abnormal answers open
// it again), the failing time of pause-after counts again from the next
// abnormal answer, and its workers start anew, so no topic keeps a backoff
// wait from before the pause. Resuming one that is not paused does
// nothing but cancel a pending automatic pause (its failing time then
// counts again from the next abnormal answer). Error:
// ErrUnknownDispatcher.
func (m *Manager) Resume(name string) error {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	d, ok := m.set.Get(name)
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownDispatcher, name)
	}
	m.mu.Lock()
	if m.paused[name] {
		// No worker runs while paused: none holds the old breaker or
		// health, which startFor makes anew.
		delete(m.breakers, name)
		delete(m.health, name)
	}
	m.cancelAutoPauseLocked(name, true)
	delete(m.paused, name)
	delete(m.pauseInfo, name)
	m.mu.Unlock()
	// A topic without a checkpoint now was created while d was paused
	// (a "latest" dispatcher's others were marked when it was created):
	// it is delivered from its start.
	m.startFor(d)
	m.log.Info("dispatcher resumed", zap.String("dispatcher", name))
	return nil
}

// Paused reports whether the dispatcher named name is paused.
func (m *Manager) Paused(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paused[name]
}

// SeekResult is where a seek moved one topic's checkpoint, and the replay
// rate it set there (nil: none; with a rate, none either when the new
// position is at the high watermark: nothing to replay).
type SeekResult struct {
	Topic    string  `json:"topic"`
	Previous int64   `json:"previous"`
	Offset   int64   `json:"offset"`
	Replay   *Replay `json:"replay,omitempty"`
}

// Seek moves the durable checkpoint of the dispatcher named name on every
// open topic it matches whose name match accepts (a topic name or a
// pattern, decided by the caller), to the offset target returns for that
// topic — backwards too: a seek is the one way a checkpoint moves back.
// Every target is computed first: target's error on one topic moves none.
// Then the dispatcher's workers stop, the checkpoints are committed and
// the workers start again from them (unless the dispatcher is paused).
// Results are sorted by topic. Errors: ErrUnknownDispatcher, target's
// error, a commit error (the topics before it are moved).
func (m *Manager) Seek(name string, match func(topic string) bool, target func(Topic) (int64, error)) ([]SeekResult, error) {
	return m.SeekAt(name, match, target, 0)
}

// SeekAt is Seek with a replay rate: with rate > 0 (messages per second,
// at most MaxReplayRate; see ValidateReplayRate) the pushes of each moved
// topic's messages from its new position up to its high watermark as of
// this call go at most rate per second, over all the moved topics
// together (one bucket for the call), until that topic's checkpoint
// reaches that high watermark (replay.go). rate 0 clears the replay rate
// of the moved topics. Errors: Seek's, and ValidateReplayRate's for a
// rate < 0 or too large (nothing moved).
func (m *Manager) SeekAt(name string, match func(topic string) bool, target func(Topic) (int64, error), rate float64) ([]SeekResult, error) {
	if rate != 0 {
		if err := ValidateReplayRate(rate); err != nil {
			return nil, err
		}
	}
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	d, ok := m.set.Get(name)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownDispatcher, name)
	}
	// Every target first: a seek that cannot move one topic moves none.
	type move struct {
		t      Topic
		to, hw int64 // hw: the high watermark as of the call
	}
	var moves []move
	for _, t := range m.openTopics() {
		if !d.Matches(t.Name()) || !match(t.Name()) {
			continue
		}
		hw := t.HighWatermark() // before the target: "latest" is then no replay
		to, err := target(t)
		if err != nil {
			return nil, fmt.Errorf("seek %s on topic %s (nothing moved): %w", name, t.Name(), err)
		}
		moves = append(moves, move{t, to, hw})
	}
	if len(moves) == 0 {
		return nil, nil
	}
	release := m.hold(name)
	defer release()
	var call *replayCall
	if rate > 0 {
		call = newReplayCall(d, rate)
	}
	var out []SeekResult
	for _, mv := range moves {
		cp, err := mv.t.Checkpoint(name)
		if err != nil {
			return out, fmt.Errorf("seek %s on topic %s: %w", name, mv.t.Name(), err)
		}
		prev := cp.Offset()
		if err := contract.SeekCheckpoint(cp, mv.to); err != nil {
			return out, fmt.Errorf("seek %s on topic %s: %w", name, mv.t.Name(), err)
		}
		var rp *replay
		if call != nil && mv.hw > mv.to {
			rp = &replay{call: call, from: mv.to}
			rp.until.Store(mv.hw)
		}
		m.mu.Lock()
		m.setReplayLocked(workerKey{name, mv.t.Name()}, rp) // no worker runs: kept for the restart
		m.mu.Unlock()
		r := SeekResult{Topic: mv.t.Name(), Previous: prev, Offset: mv.to}
		log := m.log.With(zap.String("dispatcher", name), zap.String("topic", mv.t.Name()), zap.Int64("previous", prev), zap.Int64("offset", mv.to))
		if rp != nil {
			r.Replay = rp.view()
			log = log.With(zap.Float64("replay-rate", rate), zap.Int64("replay-until", mv.hw))
		}
		out = append(out, r)
		log.Info("dispatcher checkpoint moved by a seek")
	}
	return out, nil
}

// openTopics is every topic the Source handed over and did not delete,
// sorted by name.
func (m *Manager) openTopics() []Topic {
	m.mu.Lock()
	ts := make([]Topic, 0, len(m.topics))
	for _, t := range m.topics {
		ts = append(ts, t)
	}
	m.mu.Unlock()
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name() < ts[j].Name() })
	return ts
}

// startFor starts d's worker on every open topic it matches that has no
// running worker of d, unless d is paused or the Manager is not running.
func (m *Manager) startFor(d *Dispatcher) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != stateStarted || m.paused[d.name] {
		return
	}
	for name, t := range m.topics {
		if !d.Matches(name) {
			continue
		}
		if w, ok := m.workers[workerKey{d.name, name}]; ok && !w.ended {
			continue
		}
		m.startLocked(d, t)
	}
}

// stopWorkers stops every worker whose key match accepts, waits for them
// to end and forgets them (Status no longer lists them).
func (m *Manager) stopWorkers(match func(workerKey) bool) []*worker {
	m.mu.Lock()
	var ws []*worker
	for k, w := range m.workers {
		if match(k) {
			w.deleting = true
			w.cancel()
			ws = append(ws, w)
		}
	}
	for k := range m.pending {
		if match(k) {
			delete(m.pending, k)
		}
	}
	m.mu.Unlock()
	for _, w := range ws {
		<-w.done
	}
	m.mu.Lock()
	for _, w := range ws {
		if k := (workerKey{w.d.name, w.topicName}); m.workers[k] == w {
			delete(m.workers, k)
		}
	}
	m.mu.Unlock()
	return ws
}

// checkpointRemover is a Topic that can remove a checkpoint
// (*topicqueue.TopicQueue over the local log).
type checkpointRemover interface {
	RemoveCheckpoint(name string) error
}

// DeleteCheckpoints removes the checkpoints of the dispatcher named name
// on every open topic that can remove them (call it after Remove, so no
// worker holds them). A dispatcher created again under that name starts
// from offset 0.
func (m *Manager) DeleteCheckpoints(name string) error {
	for _, t := range m.openTopics() {
		if r, ok := t.(checkpointRemover); ok {
			if err := r.RemoveCheckpoint(name); err != nil {
				return fmt.Errorf("delete checkpoints of %s: %w", name, err)
			}
		}
	}
	return nil
}

// DispatcherStatus returns one WorkerStatus per open topic the dispatcher
// named name matches, sorted by topic: the running worker's, or, for a
// topic without one (paused, or a worker that ended), its checkpoint and
// the topic's high watermark, with State StatePaused when the dispatcher
// is paused. Error: ErrUnknownDispatcher.
func (m *Manager) DispatcherStatus(name string) ([]WorkerStatus, error) {
	d, ok := m.set.Get(name)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownDispatcher, name)
	}
	running := map[string]WorkerStatus{}
	for _, s := range m.statusOf(name) {
		switch {
		case s.Running:
			running[s.Topic] = s
		case s.Err != "":
			// Ended on an error: not delivering until a restart; say so.
			s.State, s.LastError = StateFailed, s.Err
			running[s.Topic] = s
		}
	}
	paused := m.Paused(name)
	topics := m.openTopics()
	out := make([]WorkerStatus, 0, min(len(topics), 1024))
	for _, t := range topics {
		if !d.Matches(t.Name()) {
			continue
		}
		if s, ok := running[t.Name()]; ok && !paused {
			out = append(out, s)
			continue
		}
		s := WorkerStatus{Dispatcher: name, Topic: t.Name(), HighWatermark: t.HighWatermark(), State: StateIdle}
		if paused {
			s.State = StatePaused
		}
		if cp, err := t.Checkpoint(name); err == nil {
			s.Committed, s.Next = cp.Offset(), cp.Offset()
		}
		s.Lag = max(0, s.HighWatermark-s.Committed)
		s.OldestUnacked = storedAt(t, s.Committed, s.HighWatermark)
		if r := m.replayOf(workerKey{name, t.Name()}); r != nil && s.Committed < r.Until {
			s.Replay = r
		}
		out = append(out, s)
	}
	return out, nil
}

// statusOf is a snapshot of the workers of dispatcher name only (unsorted):
// with many topics, a snapshot of every dispatcher's workers costs as much
// again per other dispatcher.
func (m *Manager) statusOf(name string) []WorkerStatus {
	m.mu.Lock()
	var ws []*worker
	for k, w := range m.workers {
		if k.dispatcher == name {
			ws = append(ws, w)
		}
	}
	m.mu.Unlock()
	out := make([]WorkerStatus, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.status())
	}
	return out
}

// warnNoExister logs, once per process, that checkpoints of a backend
// cannot say whether they were ever committed (no
// contract.CheckpointExister).
var warnNoExister sync.Once

// markLatest writes d's checkpoint at the high watermark of every topic
// of ts it matches that has none: the start of a "latest" dispatcher.
func (m *Manager) markLatest(d *Dispatcher, ts []Topic) error {
	for _, t := range ts {
		if !d.Matches(t.Name()) {
			continue
		}
		cp, err := t.Checkpoint(d.name)
		if err != nil {
			return fmt.Errorf("start %s on topic %s: %w", d.name, t.Name(), err)
		}
		e, ok := cp.(contract.CheckpointExister)
		if !ok {
			warnNoExister.Do(func() {
				m.log.Warn("the storage backend cannot tell a new checkpoint from one at offset 0: a new \"latest\" dispatcher starts at its stored offset, not at the high watermark",
					zap.String("dispatcher", d.name), zap.String("topic", t.Name()), zap.String("checkpoint-type", fmt.Sprintf("%T", cp)))
			})
			continue
		}
		if !e.Exists() {
			if err := cp.Commit(t.HighWatermark()); err != nil {
				return fmt.Errorf("start %s on topic %s: %w", d.name, t.Name(), err)
			}
		}
	}
	return nil
}

// Lister is a Source that can list its topics before Subscribe
// (RegistrySource can): Start then decides the start of new "latest"
// dispatchers from Go code or the configuration file.
type Lister interface {
	Topics() []Topic
}

// startNewLatest writes, before any worker starts, the checkpoints of
// every "latest" dispatcher of the set that is new — it has a checkpoint
// on none of the topics it matches — at those topics' high watermarks. A
// dispatcher with checkpoints has run before: a topic it has none on was
// created since and is delivered from its start.
func (m *Manager) startNewLatest() error {
	l, ok := m.src.(Lister)
	if !ok {
		return nil
	}
	ts := l.Topics()
	for _, d := range m.set.All() {
		if d.Start() != StartLatest || m.seenAny(d, ts) {
			continue
		}
		if err := m.markLatest(d, ts); err != nil {
			return err
		}
	}
	return nil
}

// seenAny reports whether d has a checkpoint on one of the topics of ts
// it matches.
func (m *Manager) seenAny(d *Dispatcher, ts []Topic) bool {
	for _, t := range ts {
		if !d.Matches(t.Name()) {
			continue
		}
		if cp, err := t.Checkpoint(d.name); err == nil {
			if e, ok := cp.(contract.CheckpointExister); ok && e.Exists() {
				return true
			}
		}
	}
	return false
}

// Dispatchers returns the dispatchers of the set, sorted by name.
func (m *Manager) Dispatchers() []*Dispatcher { return m.set.All() }
