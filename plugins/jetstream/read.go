package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mmmq/mmmq/modules/contract"
)

// maxReadBatch bounds the entries of one ReadBatch: each is one request
// to the stream leader, so a larger max is served over several calls.
const maxReadBatch = 256

// readParallel is how many of a ReadBatch's requests are in flight at
// once.
const readParallel = 16

// Read returns the message JSON at offset: one message-get request to the
// stream's leader (stream sequence offset+1; the leader has every message
// below the high watermark, where a follower answering a direct get might
// not yet). Errors: contract.ErrOutOfRange for a negative offset or one at or beyond
// the high watermark; a *contract.OffsetExpiredError below StartOffset,
// also when JetStream dropped the message (MaxAge, MaxBytes) after the
// start offset was cached: a message not found refreshes the start from
// the stream's state; contract.ErrClosed; ErrTimeout or ErrUnavailable from the
// cluster.
func (l *Log) Read(offset int64) ([]byte, error) {
	if l.closed.Load() {
		return nil, fmt.Errorf("read topic %s: %w", l.topic, contract.ErrClosed)
	}
	if offset < 0 || offset >= l.hw.Load() {
		return nil, fmt.Errorf("read offset %d of topic %s: %w", offset, l.topic, contract.ErrOutOfRange)
	}
	if offset < l.start.Load() {
		return nil, l.expired(offset)
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.RequestTimeout)
	defer cancel()
	m, err := l.str.GetMsg(ctx, uint64(offset)+1)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// Gone: deleted from the head (the start offset moved) or, were
		// DenyDelete lifted, from the middle.
		if info, ierr := l.str.Info(ctx); ierr == nil {
			l.setStart(info.State)
		}
		if offset < l.start.Load() {
			return nil, l.expired(offset)
		}
		return nil, fmt.Errorf("read offset %d of topic %s: message missing below the high watermark: %w", offset, l.topic, classify(err))
	}
	if err != nil {
		return nil, fmt.Errorf("read offset %d of topic %s: %w", offset, l.topic, classify(err))
	}
	return m.Data, nil
}

func (l *Log) expired(offset int64) error {
	return &contract.OffsetExpiredError{Topic: l.topic, Offset: offset, StartOffset: l.start.Load()}
}

// ReadBatch returns up to max entries from offset from, below the high
// watermark, in offset order: one Read each, readParallel requests in
// flight, at most maxReadBatch entries per call (correct, not cheap: a
// request to the leader per message). Empty when from is at or beyond the
// high watermark. An error on the first entry is returned; one on a later
// entry ends the batch before it without error (the next call meets it
// first). Errors: those of Read.
//
// JetStream's batched get (one request, "batch" messages back) is a direct
// get only: it needs the stream's AllowDirect, which lets every replica
// answer, and a follower may not have applied yet a message this broker
// already counts below the high watermark (it learned it from the
// leader's acknowledgement). So reads go to the leader, one message each.
func (l *Log) ReadBatch(from int64, max int) ([]contract.Entry, error) {
	if l.closed.Load() {
		return nil, fmt.Errorf("read topic %s: %w", l.topic, contract.ErrClosed)
	}
	if from < 0 {
		return nil, fmt.Errorf("read offset %d of topic %s: %w", from, l.topic, contract.ErrOutOfRange)
	}
	n := min(int64(max), l.hw.Load()-from, maxReadBatch)
	if n <= 0 {
		return nil, nil
	}
	out := make([]contract.Entry, n)
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, readParallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
				out[i].Offset = from + i
				out[i].Payload, errs[i] = l.Read(from + i)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			if i == 0 {
				return nil, err
			}
			return out[:i], nil
		}
	}
	return out, nil
}

// OffsetAt returns the first offset whose message timestamp (the stored
// message JSON's "timestamp", Unix ms, as the local log uses) is at or
// after t, or HighWatermark() when there is none: a binary search of
// O(log n) Reads. A message without a timestamp counts as older than any
// t. A search that meets a message JetStream dropped since the start
// offset was cached (the Read refreshed it) searches again from the new
// start, up to 3 times. Errors: those of Read.
func (l *Log) OffsetAt(t time.Time) (int64, error) {
	off, err := contract.SearchTime(l, t)
	for range 3 {
		if !errors.Is(err, contract.ErrOffsetExpired) {
			break
		}
		off, err = contract.SearchTime(l, t)
	}
	return off, err
}
