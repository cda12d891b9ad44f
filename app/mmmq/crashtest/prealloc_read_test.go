package crashtest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
)

// Reading right behind the writer on LazyFS with preallocation on (the
// storage engine driven directly, not the binary). The segments are small
// (4 KiB, as in the ordering-key rounds), so that every segment gets a
// zero chunk and the group commits after it write into preallocated
// zeros. The kernel's FUSE page cache then now and then served those zeros
// for bytes whose write and fsync had returned: readers met index
// positions of 0 and entry headers of length 0 below the high watermark
// (in most runs of 20,000 appends; never with preallocation off, and never
// with O_DIRECT reads, which skip the kernel's cache). The engine re-reads
// such an entry through newly opened files, which drops the stale page.
const (
	prReadAppends   = 30000
	prReadProducers = 6
	prReadSegment   = 4096
)

// TestLazyFSPreallocReadAfterPublish: 6 producers append 30,000 DURABLE
// messages (distinct, 20 to 140 bytes) to one topic on LazyFS with
// preallocation on, while two readers follow the high watermark, one with
// ReadBatch (as the dispatchers do) and one with Read per offset. Every
// read must succeed and return the message acknowledged at that offset:
// no corruption reported, nothing skipped. Then a power loss (the daemon
// killed with the log open, its zero tails on disk), a remount and a
// reopen: every acknowledged message is at its offset. The re-reads the
// engine needed are logged (stale_rereads). Two shapes, each on a fresh
// mount: small-segments (4 KiB segments, one chunk each, the writer
// waiting for it) and chunks (1 MiB segments, 64 KiB ahead: many chunks
// per segment, written while the writer writes below them). It runs only
// with MMMQ_LAZYFS set; without it the test logs one line saying why and
// passes.
func TestLazyFSPreallocReadAfterPublish(t *testing.T) {
	bin, lib, why := lazyBin()
	if why != "" {
		t.Log("LazyFS preallocation read test did not run: " + why)
		return
	}
	for _, c := range []struct {
		name              string
		segment, prealloc int64
	}{{"small-segments", prReadSegment, storage.DefaultPreallocate}, {"chunks", 1 << 20, 64 << 10}} {
		t.Run(c.name, func(t *testing.T) { prReadRun(t, newLazyFS(t, bin, lib), c.segment, c.prealloc) })
	}
}

// prReadRun is one shape of TestLazyFSPreallocReadAfterPublish on fs.
func prReadRun(t *testing.T, fs *lazyFS, segment, prealloc int64) {
	dir := filepath.Join(fs.mnt, "pr")
	core, logs := observer.New(zapcore.WarnLevel)
	logger := zap.New(zapcore.NewTee(zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel)).Core(), core))
	opts := storage.Options{SegmentMaxBytes: segment, Preallocate: prealloc, Logger: logger}
	l, err := storage.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = l.Close()
		}
	}()

	msg := func(i int64) string { return fmt.Sprintf(`{"n":%d,"pad":"%0*d"}`, i, int(i%120), 0) }
	var mu sync.Mutex
	acked := map[int64]string{} // offset → message
	var next atomic.Int64
	var prod sync.WaitGroup
	for range prReadProducers {
		prod.Add(1)
		go func() {
			defer prod.Done()
			for i := next.Add(1); i <= prReadAppends; i = next.Add(1) {
				m := msg(i)
				off, err := l.Append(context.Background(), []byte(m), contract.Durable)
				if err != nil {
					t.Errorf("append %d: %v", i, err)
					return
				}
				mu.Lock()
				acked[off] = m
				mu.Unlock()
			}
		}()
	}

	// Readers keep what they read; it is compared with acked once every
	// append returned (a read may run ahead of its producer's answer).
	type read struct {
		off     int64
		payload string
	}
	out := make([][]read, 2)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for r := range out {
		readers.Add(1)
		go func() {
			defer readers.Done()
			var off int64
			for off < prReadAppends {
				select {
				case <-l.Notify(off):
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if r == 1 {
					for hw := l.HighWatermark(); off < hw; off++ {
						p, err := l.Read(off)
						if err != nil {
							t.Errorf("Read(%d) (high watermark %d): %v", off, hw, err)
							continue
						}
						out[r] = append(out[r], read{off, string(p)})
					}
					continue
				}
				es, err := l.ReadBatch(off, 64)
				for _, e := range es {
					out[r] = append(out[r], read{e.Offset, string(e.Payload)})
				}
				off += int64(len(es))
				if err != nil {
					t.Errorf("ReadBatch(%d) (high watermark %d): %v", off, l.HighWatermark(), err)
					var ce *contract.CorruptionError
					if !errors.As(err, &ce) {
						return
					}
					off = ce.Offset + 1 // skipped, as a dispatcher does
				}
			}
		}()
	}
	prod.Wait()
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		close(stop)
		<-done
		t.Errorf("readers did not reach offset %d within a minute of the last append", prReadAppends)
	}
	if len(acked) != prReadAppends {
		t.Fatalf("%d appends acknowledged, want %d", len(acked), prReadAppends)
	}
	for r, rs := range out {
		bad := 0
		for _, g := range rs {
			if acked[g.off] != g.payload {
				if bad++; bad <= 5 {
					t.Errorf("reader %d: offset %d read %q, acknowledged %q", r, g.off, g.payload, acked[g.off])
				}
			}
		}
		if len(rs) != prReadAppends {
			t.Errorf("reader %d read %d entries, want %d", r, len(rs), prReadAppends)
		}
	}
	stale := logs.FilterMessageSnippet("read intact from newly opened files").Len()
	t.Logf("appends=%d segments=%d stale_rereads=%d", prReadAppends, l.Stats().Segments, stale)

	// A power loss with the log open: only what was fsynced survives.
	fs.killDaemon()
	_ = l.Close() // the mount is gone: its errors are expected
	closed = true
	fs.remount()
	opts.Logger = zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel))
	l2, err := storage.Open(dir, opts)
	if err != nil {
		t.Fatalf("reopen after the power loss: %v", err)
	}
	defer l2.Close()
	lost := 0
	for off, m := range acked {
		if p, err := l2.Read(off); err != nil || string(p) != m {
			if lost++; lost <= 5 {
				t.Errorf("after the power loss: offset %d = %q, %v; acknowledged %q", off, p, err, m)
			}
		}
	}
	t.Logf("after the power loss: high watermark %d, %d of %d acknowledged messages lost, zero-tail bytes cut %d",
		l2.HighWatermark(), lost, len(acked), l2.Repair().ZeroTailBytes)
}
