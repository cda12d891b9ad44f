package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// due is one message the mover appends.
type due struct {
	entry
	bucket int64 // its file (not bucketOf(at): the width may have changed since)
	stored []byte
}

// MoveDue appends every message due at the clock's now to its topic and
// records it delivered, bucket by bucket, MoveBatch at a time. It returns
// the number moved and the next time something falls due (zero when
// nothing is pending). The mover calls it; tests may call it directly.
//
// Steps are pipelined: a step's delivered records share the fsync of the
// next step's moving records (both must be durable before the next
// append), so a step costs two fsyncs, its moving records' and its topic
// append's; the last step's delivered records are waited for before
// MoveDue returns.
func (s *Scheduler) MoveDue(ctx context.Context) (moved int, next time.Time, err error) {
	var prev *stepDone
	for {
		batch, next, err := s.takeDue()
		if err != nil || len(batch) == 0 {
			if prev != nil {
				ferr := s.finishStep(prev)
				prev = nil
				if err == nil && ferr == nil {
					continue // look again: what prev held is done now
				}
				err = cmp.Or(err, ferr)
			}
			if err != nil {
				next = time.Time{}
			}
			return moved, next, err
		}
		sd, n, err := s.deliver(ctx, batch, prev)
		prev = sd
		moved += n
		if err != nil {
			if prev != nil {
				s.finishStep(prev)
			}
			return moved, time.Time{}, err
		}
	}
}

// stepDone is a mover step whose delivered records are written, not yet
// known to be fsynced.
type stepDone struct {
	cb     *commitBatch
	bucket int64
	moved  []due // recorded delivered
	batch  []due // every entry the step marked moving
}

// finishStep waits for a step's delivered records and then counts its
// messages done; on an error (the store failed) they stay pending.
func (s *Scheduler) finishStep(sd *stepDone) error {
	err := sd.cb.wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range sd.batch {
		delete(s.moving, d.id)
	}
	if err != nil {
		return err
	}
	done := map[string]bool{}
	for _, d := range sd.moved {
		done[d.id] = true
		s.dropPending(d.topic, 1)
		s.countFile(sd.bucket, d.topic, -1)
	}
	if c := s.cur; c != nil && c.bucket == sd.bucket {
		c.removeFront(done)
	}
	return nil
}

// takeDue picks the next due messages (reading them from their file) and
// marks them moving; none when nothing is due, with the next due time.
func (s *Scheduler) takeDue() ([]due, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, time.Time{}, err
	}
	now := s.opts.Now().UnixMilli()
	keys := make([]int64, 0, len(s.sizes))
	for k := range s.sizes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// Every bucket whose start has passed may hold due entries (buckets
	// of another bucket-width, from before a restart, may overlap), so
	// they are visited in order; the next wake-up is the earliest of
	// their first pending entries and the next bucket's start.
	next := int64(0)
	soonest := func(t int64) {
		if next == 0 || t < next {
			next = t
		}
	}
	maxBytes := max(1, s.opts.MemoryBudget/2)
	for _, b := range keys {
		if b > now {
			soonest(b)
			break
		}
		if s.cur == nil || s.cur.bucket != b {
			c, err := s.loadWindow(b, first)
			if err != nil {
				return nil, time.Time{}, s.fail(err)
			}
			s.cur = c
		}
		for len(s.cur.pending) == 0 && s.cur.more {
			c, err := s.loadWindow(b, s.cur.bound)
			if err != nil {
				return nil, time.Time{}, s.fail(err)
			}
			s.cur = c
		}
		c := s.cur
		if len(c.pending) == 0 {
			if len(s.perFile[b]) > 0 {
				continue // records not yet fsynced: visible when they are
			}
			if err := s.opts.FS.Remove(s.path(b)); err != nil {
				return nil, time.Time{}, s.fail(fmt.Errorf("remove %s: %w", s.path(b), err))
			}
			if err := s.syncDir(); err != nil {
				return nil, time.Time{}, s.fail(fmt.Errorf("fsync %s: %w", s.opts.Dir, err))
			}
			delete(s.sizes, b)
			delete(s.lastAt, b)
			s.cur = nil
			continue
		}
		var batch []due
		var f vfs.File
		bytes := int64(0)
		for _, e := range c.pending {
			if e.at > now || len(batch) == s.opts.MoveBatch || bytes >= maxBytes {
				break
			}
			if s.moving[e.id] != "" || s.dropping[e.topic] {
				continue // being cancelled or moved; its topic being deleted
			}
			if _, blocked := s.blockedTopic(e.topic, now); blocked {
				continue // its topic's last move failed: retried later
			}
			if f == nil {
				var err error
				if f, err = s.opts.FS.Open(s.path(b)); err != nil {
					return nil, time.Time{}, s.fail(fmt.Errorf("open %s: %w", s.path(b), err))
				}
				defer f.Close()
			}
			msg, err := readMessage(f, e)
			if err != nil {
				return nil, time.Time{}, s.fail(fmt.Errorf("read %s at %d: %w", s.path(b), e.off, err))
			}
			bytes += int64(len(msg))
			batch = append(batch, due{entry: e, bucket: b, stored: msg})
		}
		if len(batch) > 0 {
			for _, d := range batch {
				s.moving[d.id] = d.topic
			}
			return batch, time.Time{}, nil
		}
		// The first entry not being moved gives the wake-up; a stuck
		// topic's, its retry time (the scan goes on past them: another
		// topic's entry may be due sooner).
		for _, e := range c.pending {
			if s.moving[e.id] != "" {
				continue
			}
			if retry, blocked := s.blockedTopic(e.topic, now); blocked {
				soonest(max(retry, e.at))
				continue
			}
			soonest(e.at)
			break
		}
		if c.more {
			soonest(c.bound.at) // entries after the window are due no earlier
		}
	}
	s.wakeAt = next
	if next == 0 {
		return nil, time.Time{}, nil
	}
	return nil, time.UnixMilli(next), nil
}

// deliver moves batch (one bucket's) exactly once when the target is a
// Ledger: the entries with a moving record from an earlier attempt are
// looked for in their topic first (found: only recorded delivered); the
// others get their moving records (the topic's high watermark now) in one
// fsync, are appended in order carrying HeaderScheduleID, and then all
// get their delivered records, written but not waited for: the returned
// step is finished (finishStep) by the next step's, or MoveDue's, wait.
// prev, the step before, is finished here. It returns how many were moved;
// a failed append stops the batch (its rest is moved on a later pass,
// looked for first).
func (s *Scheduler) deliver(ctx context.Context, batch []due, prev *stepDone) (*stepDone, int, error) {
	b := batch[0].bucket
	settle := func() error {
		if prev == nil {
			return nil
		}
		err := s.finishStep(prev)
		prev = nil
		return err
	}
	defer settle()
	ledger, _ := s.target.(Ledger)
	release := func() {
		s.mu.Lock()
		for _, d := range batch {
			delete(s.moving, d.id)
		}
		s.mu.Unlock()
	}
	already := map[string]bool{}
	// failed is the topics whose step failed (a look into the topic or
	// its append): their messages stay pending, retried after a backoff,
	// and the other topics' go on.
	failed := map[string]error{}
	if ledger != nil {
		ids, from := map[string]map[string]bool{}, map[string]int64{}
		for _, d := range batch {
			if d.hwm < 0 {
				continue
			}
			if ids[d.topic] == nil {
				ids[d.topic], from[d.topic] = map[string]bool{}, d.hwm
			}
			ids[d.topic][d.id] = true
			from[d.topic] = min(from[d.topic], d.hwm)
		}
		for t, want := range ids {
			found, err := ledger.Find(ctx, t, from[t], want)
			if err != nil && isGlobal(err) {
				release()
				return nil, 0, fmt.Errorf("schedule: look in topic %q for messages moved before: %w", t, err)
			}
			if err != nil {
				failed[t] = fmt.Errorf("schedule: look in topic %q for messages moved before: %w", t, err)
				continue
			}
			for id := range found {
				already[id] = true
			}
		}
		if len(already) > 0 {
			s.log.Info("scheduled messages: found in their topic, not appended again", zap.Int("messages", len(already)))
		}
	}
	hw := map[string]int64{}
	if ledger != nil {
		for _, d := range batch {
			if _, ok := hw[d.topic]; ok || already[d.id] || failed[d.topic] != nil {
				continue
			}
			h, err := ledger.HighWatermark(d.topic)
			if err != nil {
				failed[d.topic] = fmt.Errorf("schedule: high watermark of topic %q: %w", d.topic, err)
				continue
			}
			hw[d.topic] = h
		}
	}
	var todo []due
	for _, d := range batch {
		if !already[d.id] && failed[d.topic] == nil {
			todo = append(todo, d)
		}
	}
	if ledger != nil && len(todo) > 0 {
		var rec []byte
		for i, d := range todo {
			h := hw[d.topic]
			rec = appendMoving(rec, h, d.id)
			if todo[i].hwm < 0 || h < todo[i].hwm {
				todo[i].hwm = h
			}
		}
		if err := s.writeIntent(b, rec); err != nil {
			release()
			return nil, 0, err
		}
	}
	// The moving records' fsync covered prev's delivered records (written
	// before them); without moving records, this waits for them.
	if err := settle(); err != nil {
		release()
		return nil, 0, err
	}
	appended, appendErr := s.appendAll(ctx, todo, failed)
	var moved, rest []due
	for _, d := range todo {
		if appended[d.id] {
			moved = append(moved, d)
		} else {
			rest = append(rest, d)
		}
	}
	for _, d := range batch {
		if already[d.id] {
			moved = append(moved, d)
		}
	}
	s.mu.Lock()
	s.settleStuck(batch, moved, failed)
	if len(rest) > 0 && ledger != nil {
		// Their moving records are on disk: looked for on the next try.
		hwm := map[string]int64{}
		for _, d := range rest {
			hwm[d.id] = d.hwm
		}
		if c := s.cur; c != nil && c.bucket == b {
			for i := range c.pending {
				if h, ok := hwm[c.pending[i].id]; ok {
					c.pending[i].hwm = h
				}
			}
		}
	}
	if len(moved) == 0 {
		s.mu.Unlock()
		release()
		return nil, 0, appendErr
	}
	var rec []byte
	now := s.opts.Now()
	for _, d := range moved {
		rec = appendDone(rec, kindDelivered, d.id)
		s.moved++
		s.late.observe(now.Sub(time.UnixMilli(d.at)))
	}
	err := s.waitRoom(b, len(rec))
	var cb *commitBatch
	if err == nil {
		cb, _, err = s.write(b, rec)
	}
	s.mu.Unlock()
	if err != nil {
		release()
		return nil, 0, err
	}
	return &stepDone{cb: cb, bucket: b, moved: moved, batch: batch}, len(moved), appendErr
}

// removeFront removes the entries whose ids are in done, which are near
// the front (a mover step takes the earliest): it looks only as far as the
// last of them, and keeps the rest in place, so a step costs what it
// moved, not the size of the window.
func (c *loaded) removeFront(done map[string]bool) {
	p, found := 0, 0
	for p < len(c.pending) && found < len(done) {
		if done[c.pending[p].id] {
			found++
		}
		p++
	}
	// Compact the prefix towards p: the kept ones end at p.
	w := p
	for i := p - 1; i >= 0; i-- {
		if !done[c.pending[i].id] {
			w--
			c.pending[w] = c.pending[i]
		}
	}
	clear(c.pending[:w])
	c.pending = c.pending[w:]
}

// run is the mover: it moves what is due, then sleeps until the next due
// time, a Schedule of an earlier one, or Stop. After an error it retries
// a second later (a failed store stays failed: it needs a restart).
func (s *Scheduler) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		_, next, err := s.MoveDue(ctx)
		wait := time.Hour
		switch {
		case err != nil:
			if !errors.Is(err, context.Canceled) {
				s.log.Warn("scheduled messages: move failed; retrying in 1s", zap.Error(err))
			}
			wait = time.Second
		case !next.IsZero():
			// Never early: woken at or after the due time, and MoveDue
			// compares again.
			wait = max(next.Sub(s.opts.Now())+time.Millisecond, time.Millisecond)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}

// writeIntent writes a step's moving records and waits for their fsync
// (shared with whatever else is in the batch).
func (s *Scheduler) writeIntent(b int64, rec []byte) error {
	s.mu.Lock()
	if s.opts.skipIntentSync {
		// Negative control: written, not fsynced before the appends.
		defer s.mu.Unlock()
		f, err := s.opts.FS.OpenRW(s.path(b))
		if err != nil {
			return s.fail(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(rec, s.sizes[b]); err != nil {
			return s.fail(err)
		}
		s.sizes[b] += int64(len(rec))
		return nil
	}
	if err := s.waitRoom(b, len(rec)); err != nil {
		s.mu.Unlock()
		return err
	}
	cb, _, err := s.write(b, rec)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return cb.wait()
}

// appendAll appends todo to their topics in order, carrying
// HeaderScheduleID: each run of one topic in one call when the target is
// a BatchTarget, else one by one. A topic whose append fails is recorded
// in failed and none of its later messages is tried (its order holds);
// the other topics' go on. It returns the ids appended (a failed run
// counts as none of it: what of it reached the topic is found there by
// its moving records), and an error only when the mover is ending.
func (s *Scheduler) appendAll(ctx context.Context, todo []due, failed map[string]error) (map[string]bool, error) {
	bt, batched := s.target.(BatchTarget)
	appended := map[string]bool{}
	for n := 0; n < len(todo); {
		topic := todo[n].topic
		j := n + 1
		for batched && j < len(todo) && todo[j].topic == topic {
			j++
		}
		run := todo[n:j]
		n = j
		if failed[topic] != nil {
			continue
		}
		msgs := make([][]byte, 0, len(run))
		var err error
		for _, d := range run {
			var msg []byte
			if msg, err = withScheduleID(d.stored, d.id); err != nil {
				err = fmt.Errorf("schedule: stored message of %s: %w", d.id, err)
				break
			}
			msgs = append(msgs, msg)
		}
		if err == nil {
			if batched {
				err = bt.AppendBatch(ctx, topic, msgs)
			} else {
				err = s.target.Append(ctx, topic, msgs[0])
			}
			if err != nil {
				err = fmt.Errorf("schedule: append to topic %q: %w", topic, err)
			}
		}
		if err != nil {
			if isGlobal(err) || ctx.Err() != nil {
				return appended, err
			}
			failed[topic] = err
			continue
		}
		for _, d := range run {
			appended[d.id] = true
		}
	}
	return appended, nil
}

// settleStuck records the step's outcome per topic: a topic in failed is
// stuck (its messages of batch named in the warning), a topic with a
// message moved is not; s.mu held.
func (s *Scheduler) settleStuck(batch, moved []due, failed map[string]error) {
	for _, d := range moved {
		if failed[d.topic] == nil {
			s.clearStuck(d.topic)
		}
	}
	if len(failed) == 0 {
		return
	}
	ids := map[string][]string{}
	for _, d := range batch {
		if failed[d.topic] != nil {
			ids[d.topic] = append(ids[d.topic], d.id)
		}
	}
	for t, err := range failed {
		s.noteStuck(t, ids[t], err)
	}
}
