package schedule

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"
)

// DropTopic implements contract.ScheduleDropper: it drops every pending
// message of topic and calls del, which deletes the topic itself, and
// returns how many were dropped. Durable in this order: a marker file
// <Dir>/<topic>.drop (fsynced, and the directory), a dropped record in
// every bucket file holding messages of topic (one group fsync), del,
// then the marker is removed. A crash before the marker is durable leaves
// both the topic and its scheduled messages; after it, recovery (Open)
// writes the dropped records again and deletes the topic through the
// Target's TopicDeleter, so both are gone. When del fails the messages are
// dropped already and the marker stays: the error is returned with the
// count, and a retry (which removes the marker once del succeeds) or the
// next start finishes the deletion.
//
// A Schedule of topic while DropTopic runs is ErrTopicDeleting (409
// TOPIC_BUSY); one acknowledged before it started is dropped with the
// others; one after it returned creates the topic again when due. Moves
// of topic under way are waited for (they are appended and then deleted
// with the topic).
func (s *Scheduler) DropTopic(ctx context.Context, topic string, del func() error) (int, error) {
	if s.opts.Unsupported != "" {
		return 0, del()
	}
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return 0, err
	}
	if s.dropping[topic] {
		s.mu.Unlock()
		return 0, ErrTopicDeleting
	}
	s.dropping[topic] = true
	defer func() {
		s.mu.Lock()
		delete(s.dropping, topic)
		s.mu.Unlock()
	}()
	for s.movingOf(topic) {
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		s.mu.Lock()
	}
	n := s.pending[topic]
	marker := filepath.Join(s.opts.Dir, topic+dropExt)
	if n == 0 && !s.markers[topic] {
		s.mu.Unlock()
		return 0, del()
	}
	if n > 0 && !s.markers[topic] && !s.opts.skipDropMarker {
		if err := s.writeMarker(marker); err != nil {
			s.mu.Unlock()
			return 0, err
		}
		s.markers[topic] = true
	}
	var cb *commitBatch
	for _, b := range s.filesOf(topic) {
		var err error
		if cb, _, err = s.write(b, appendDropped(nil, topic)); err != nil {
			s.mu.Unlock()
			return 0, err
		}
	}
	s.mu.Unlock()
	if cb != nil {
		if err := cb.wait(); err != nil {
			return 0, err
		}
	}
	s.mu.Lock()
	s.forgetTopic(topic)
	s.mu.Unlock()
	if err := del(); err != nil {
		return n, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.markers[topic] {
		return n, nil
	}
	if err := s.opts.FS.Remove(marker); err != nil {
		return n, s.fail(fmt.Errorf("remove %s: %w", marker, err))
	}
	if err := s.syncDir(); err != nil {
		return n, s.fail(fmt.Errorf("fsync %s: %w", s.opts.Dir, err))
	}
	delete(s.markers, topic)
	return n, nil
}

// finishDrop completes a DropTopic a crash interrupted (its marker is in
// Dir): dropped records, the topic's deletion, the marker's removal. It
// returns how many pending messages it dropped. Open calls it, s.mu held,
// before the flusher runs.
func (s *Scheduler) finishDrop(topic string) (int, error) {
	n := s.pending[topic]
	for _, b := range s.filesOf(topic) {
		if err := s.appendRecordSync(b, appendDropped(nil, topic)); err != nil {
			return n, err
		}
	}
	s.forgetTopic(topic)
	if d, ok := s.target.(TopicDeleter); ok {
		if err := d.DeleteTopic(topic); err != nil {
			return n, fmt.Errorf("delete topic: %w", err)
		}
	} else {
		s.log.Warn("scheduled messages: cannot finish the deletion of a topic (the target deletes no topics); delete it again")
	}
	marker := filepath.Join(s.opts.Dir, topic+dropExt)
	if err := s.opts.FS.Remove(marker); err != nil {
		return n, fmt.Errorf("remove %s: %w", marker, err)
	}
	if err := s.syncDir(); err != nil {
		return n, fmt.Errorf("fsync %s: %w", s.opts.Dir, err)
	}
	return n, nil
}

// movingOf says whether a move or cancel of topic is under way; s.mu is
// held.
func (s *Scheduler) movingOf(topic string) bool {
	for _, t := range s.moving {
		if t == topic {
			return true
		}
	}
	return false
}

// filesOf is the buckets holding pending messages of topic, in order;
// s.mu is held.
func (s *Scheduler) filesOf(topic string) []int64 {
	var bs []int64
	for b, m := range s.perFile {
		if m[topic] > 0 {
			bs = append(bs, b)
		}
	}
	slices.Sort(bs)
	return bs
}

// forgetTopic drops topic's pending messages from memory, and its stuck
// state (nothing is left to retry); s.mu is held.
func (s *Scheduler) forgetTopic(topic string) {
	delete(s.pending, topic)
	delete(s.stuck, topic)
	for _, b := range s.filesOf(topic) {
		s.countFile(b, topic, -s.perFile[b][topic])
	}
	if c := s.cur; c != nil {
		c.pending = slices.DeleteFunc(c.pending, func(e entry) bool { return e.topic == topic })
	}
}

// writeMarker creates the empty file name and makes it durable (the file
// and the directory); s.mu is held. An error fails the store.
func (s *Scheduler) writeMarker(name string) error {
	if !s.dirMade {
		if err := s.makeDir(); err != nil {
			return s.fail(err)
		}
	}
	f, err := s.opts.FS.Create(name)
	if err != nil {
		return s.fail(fmt.Errorf("create %s: %w", name, err))
	}
	defer f.Close()
	if err := s.sync(f); err != nil {
		return s.fail(fmt.Errorf("fsync %s: %w", name, err))
	}
	if err := s.syncDir(); err != nil {
		return s.fail(fmt.Errorf("fsync %s: %w", s.opts.Dir, err))
	}
	return nil
}
