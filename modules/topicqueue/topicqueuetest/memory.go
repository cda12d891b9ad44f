package topicqueuetest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// MemBackend is a topicqueue.Backend that keeps everything in memory: the
// proof that everything above the registry (HTTP publish and read-back,
// dispatchers, consumer groups, the line protocol) works through
// topicqueue.Backend and contract.Log alone, and the third backend of the
// conformance suite (RunLogConformance with Volatile: a closed log is
// forgotten, so a topic opened again starts empty). The zero value is
// ready; MaxRecordBytes 0 is 1 MiB. Safe for concurrent use.
type MemBackend struct {
	// MaxRecordBytes is the largest payload Append accepts (0: 1 MiB).
	MaxRecordBytes int

	mu     sync.Mutex
	logs   map[string]*MemLog
	locked bool
}

var _ topicqueue.Backend = (*MemBackend)(nil)

// Open returns topic name's open log, or with create a new empty one (also
// for a topic whose log was closed). Error: the topic is not open and
// create is false.
func (b *MemBackend) Open(name string, create bool) (contract.Log, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l, ok := b.logs[name]; ok && !l.isClosed() {
		return l, nil
	}
	if !create {
		return nil, fmt.Errorf("memlog: no topic %s", name)
	}
	max := b.MaxRecordBytes
	if max <= 0 {
		max = 1 << 20
	}
	l := &MemLog{name: name, max: max, waiting: map[int64]chan struct{}{}, cps: map[string]*memCheckpoint{}}
	if b.logs == nil {
		b.logs = map[string]*MemLog{}
	}
	b.logs[name] = l
	return l, nil
}

// Topics lists nothing: a new process has no topics in memory.
func (b *MemBackend) Topics() (names, skipped []string, err error) { return nil, nil, nil }

// Lock takes the backend's lock; topicqueue.ErrRootInUse while it is held.
func (b *MemBackend) Lock() (func() error, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.locked {
		return nil, topicqueue.ErrRootInUse
	}
	b.locked = true
	return func() error { b.mu.Lock(); b.locked = false; b.mu.Unlock(); return nil }, nil
}

// Log returns topic's last opened log, nil when it never was.
func (b *MemBackend) Log(topic string) *MemLog {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.logs[topic]
}

// MemLog is one topic of a MemBackend: a contract.Log in memory, with the
// seam's errors (contract.ErrOutOfRange, ErrEmptyRecord, ErrRecordTooLarge,
// ErrClosed) and no optional capability. Every level is reached at once.
type MemLog struct {
	name string
	max  int
	mu   sync.Mutex
	msgs [][]byte
	// waiting are the Notify channels by offset, closed once it is stored
	// (as contract.Log promises: not before).
	waiting map[int64]chan struct{}
	closed  bool
	cps     map[string]*memCheckpoint
}

func (l *MemLog) isClosed() bool { l.mu.Lock(); defer l.mu.Unlock(); return l.closed }

// Append stores p (see contract.Log).
func (l *MemLog) Append(ctx context.Context, p []byte, lvl contract.AckLevel) (int64, error) {
	return l.AppendBatch(ctx, [][]byte{p}, lvl)
}

// AppendBatch stores ps with consecutive offsets (see contract.Log).
func (l *MemLog) AppendBatch(_ context.Context, ps [][]byte, lvl contract.AckLevel) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return -1, fmt.Errorf("memlog %s: %w", l.name, contract.ErrClosed)
	}
	for i, p := range ps {
		switch {
		case len(p) < contract.MinPayloadBytes:
			return -1, fmt.Errorf("memlog %s: payload %d: %w", l.name, i, contract.ErrEmptyRecord)
		case len(p) > l.max:
			return -1, fmt.Errorf("memlog %s: payload %d of %d bytes: %w", l.name, i, len(p), contract.ErrRecordTooLarge)
		}
	}
	first := int64(len(l.msgs))
	for _, p := range ps {
		l.msgs = append(l.msgs, append([]byte(nil), p...))
	}
	for off, ch := range l.waiting {
		if off < int64(len(l.msgs)) {
			close(ch)
			delete(l.waiting, off)
		}
	}
	if lvl == contract.Accepted {
		return -1, nil
	}
	return first, nil
}

// Read returns the message at offset (see contract.Log).
func (l *MemLog) Read(offset int64) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if offset < 0 || offset >= int64(len(l.msgs)) {
		return nil, fmt.Errorf("memlog %s: offset %d: %w", l.name, offset, contract.ErrOutOfRange)
	}
	return l.msgs[offset], nil
}

// ReadBatch returns up to max messages from from (see contract.Log).
func (l *MemLog) ReadBatch(from int64, max int) ([]contract.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("memlog %s: %w", l.name, contract.ErrClosed)
	}
	var out []contract.Entry
	for o := from; o < int64(len(l.msgs)) && len(out) < max; o++ {
		out = append(out, contract.Entry{Offset: o, Payload: l.msgs[o]})
	}
	return out, nil
}

// HighWatermark is the number of messages stored.
func (l *MemLog) HighWatermark() int64 { l.mu.Lock(); defer l.mu.Unlock(); return int64(len(l.msgs)) }

// Notify returns a channel closed once offset is stored or the log closed.
func (l *MemLog) Notify(offset int64) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || int64(len(l.msgs)) > offset {
		c := make(chan struct{})
		close(c)
		return c
	}
	ch, ok := l.waiting[offset]
	if !ok {
		ch = make(chan struct{})
		l.waiting[offset] = ch
	}
	return ch
}

// StartOffset is 0: nothing is ever deleted.
func (l *MemLog) StartOffset() int64 { return 0 }

// OffsetAt is contract.SearchTime's answer, by a linear scan.
func (l *MemLog) OffsetAt(t time.Time) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, m := range l.msgs {
		if ts, ok := contract.MessageTimestamp(m); ok && ts >= t.UnixMilli() {
			return int64(i), nil
		}
	}
	return int64(len(l.msgs)), nil
}

// Stats has the topic and the high watermark.
func (l *MemLog) Stats() contract.Stats {
	return contract.Stats{Topic: l.name, NextOffset: l.HighWatermark()}
}

// OpenCheckpoint returns checkpoint name, made at 0 on first use.
func (l *MemLog) OpenCheckpoint(name string) (contract.Checkpoint, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("memlog %s: %w", l.name, contract.ErrClosed)
	}
	cp := l.cps[name]
	if cp == nil {
		cp = &memCheckpoint{name: name}
		l.cps[name] = cp
	}
	return cp, nil
}

// CheckpointOffset is checkpoint name's offset, false when it was never
// opened.
func (l *MemLog) CheckpointOffset(name string) (int64, bool) {
	l.mu.Lock()
	cp := l.cps[name]
	l.mu.Unlock()
	if cp == nil {
		return -1, false
	}
	return cp.Offset(), true
}

// Close closes the log and every Notify channel; later calls fail with
// contract.ErrClosed.
func (l *MemLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		for _, ch := range l.waiting {
			close(ch)
		}
		l.waiting = nil
	}
	return nil
}

type memCheckpoint struct {
	name string
	mu   sync.Mutex
	next int64
}

func (c *memCheckpoint) Name() string  { return c.name }
func (c *memCheckpoint) Path() string  { return "memory:" + c.name }
func (c *memCheckpoint) Offset() int64 { c.mu.Lock(); defer c.mu.Unlock(); return c.next }
func (c *memCheckpoint) Commit(next int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next = next
	return nil
}
