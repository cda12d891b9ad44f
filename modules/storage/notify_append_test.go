package storage

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

type notified struct {
	first int64
	err   error
	hw    int64 // the high watermark when notify ran
}

// TestAppendBatchNotify: notify is called exactly once per queued batch,
// with the first offset once the level is reached (DURABLE and ACCEPTED:
// visible; WRITTEN: at least written), with the error when the write
// fails, and never when the batch is refused up front.
func TestAppendBatchNotify(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{SegmentMaxBytes: 256})
	defer l.Close()
	ch := make(chan notified, 8)
	notify := func(first int64, err error) { ch <- notified{first, err, l.HighWatermark()} }
	for i, lvl := range []contract.AckLevel{contract.Durable, contract.Written, contract.Accepted} {
		if err := l.AppendBatchNotify([][]byte{payload(2*i, 20), payload(2*i+1, 20)}, lvl, notify); err != nil {
			t.Fatalf("%s: %v", lvl, err)
		}
		n := <-ch
		if n.err != nil || n.first != int64(2*i) {
			t.Fatalf("%s: notified %+v, want first %d", lvl, n, 2*i)
		}
		if lvl != contract.Written && n.hw < n.first+2 {
			t.Fatalf("%s: notified at high watermark %d, before offsets %d-%d were visible", lvl, n.hw, n.first, n.first+1)
		}
	}
	if err := l.AppendBatchNotify([][]byte{payload(9, 20)}, contract.Durable, nil); err == nil {
		t.Fatal("nil notify accepted")
	}
	// Refused up front: an error, and notify is never called.
	if err := l.AppendBatchNotify([][]byte{[]byte(strings.Repeat("x", 2*defaultMaxRecordBytes))}, contract.Durable, notify); !errors.Is(err, contract.ErrRecordTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	// A failed write reaches notify with the error.
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, SegmentExt) {
			return errEIO
		}
		return nil
	})
	if err := l.AppendBatchNotify([][]byte{payload(6, 20)}, contract.Durable, notify); err != nil {
		t.Fatal(err)
	}
	if n := <-ch; !errors.Is(n.err, ErrFailed) || n.first != -1 {
		t.Fatalf("failed write notified %+v, want ErrFailed and -1", n)
	}
	fsys.SetHook(nil)
	if err := l.AppendBatchNotify([][]byte{payload(7, 20)}, contract.Durable, notify); !errors.Is(err, ErrFailed) {
		t.Fatalf("append to a failed log: %v", err)
	}
	select {
	case n := <-ch:
		t.Fatalf("notify called for refused batches: %+v", n)
	default:
	}
	if _, err := l.Append(context.Background(), payload(8, 20), contract.Durable); !errors.Is(err, ErrFailed) {
		t.Fatalf("Append after the failure: %v", err)
	}
}
