package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Benchmarks: 200-byte entries, DURABLE, on
// the real filesystem (b.TempDir) wrapped in vfs.CountingFS. Run with
//
//	go test -run x -bench . -benchtime 2s ./modules/storage/
//
// msgs/s and fsyncs/msg are reported; compare BenchmarkAppend/appenders=64
// with BenchmarkAppendJavaBaseline from the same run.

var benchPayload = func() []byte { return payload(0, 200) }()

// BenchmarkAppend runs N appenders in both index-sync modes: commit (two
// fsyncs per group commit) and lazy (one; the index fsynced at the default
// 1 s interval).
func BenchmarkAppend(b *testing.B) {
	for _, mode := range []IndexSync{IndexSyncCommit, IndexSyncLazy} {
		for _, n := range []int{1, 16, 64, 256} {
			b.Run(fmt.Sprintf("index-sync=%s/appenders=%d", mode, n), func(b *testing.B) {
				fsys := vfs.NewCounting(vfs.OS{})
				l, err := Open(filepath.Join(b.TempDir(), "bench"), Options{FS: fsys, Logger: zap.NewNop(), IndexSync: mode})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				runAppenders(b, n, fsys, func() error {
					_, err := l.Append(context.Background(), benchPayload, contract.Durable)
					return err
				})
			})
		}
	}
}

// BenchmarkAppendJavaBaseline does what the Java original does: one global
// lock; per message WriteAt .mmm, fsync, WriteAt .idx, fsync. 64 appenders,
// same filesystem and payload as BenchmarkAppend.
func BenchmarkAppendJavaBaseline(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("appenders=%d", n), func(b *testing.B) {
			fsys := vfs.NewCounting(vfs.OS{})
			dir := filepath.Join(b.TempDir(), "bench")
			if err := fsys.MkdirAll(dir); err != nil {
				b.Fatal(err)
			}
			mmm, err := fsys.Create(filepath.Join(dir, SegmentName(0)+SegmentExt))
			if err != nil {
				b.Fatal(err)
			}
			defer mmm.Close()
			idx, err := fsys.Create(filepath.Join(dir, SegmentName(0)+IndexExt))
			if err != nil {
				b.Fatal(err)
			}
			defer idx.Close()
			var mu sync.Mutex
			var size, count int64
			entry := AppendEntry(nil, benchPayload)
			appendOne := func() error {
				mu.Lock()
				defer mu.Unlock()
				if _, err := mmm.WriteAt(entry, size); err != nil {
					return err
				}
				if err := mmm.Sync(); err != nil {
					return err
				}
				var ib [IndexEntrySize]byte
				binary.BigEndian.PutUint64(ib[:], uint64(size))
				if _, err := idx.WriteAt(ib[:], count*IndexEntrySize); err != nil {
					return err
				}
				if err := idx.Sync(); err != nil {
					return err
				}
				size += int64(len(entry))
				count++
				return nil
			}
			runAppenders(b, n, fsys, appendOne)
		})
	}
}

// runAppenders times b.N calls of appendOne, each appending benchPayload,
// shared out among n goroutines, and reports msgs/s and the fsyncs per
// message counted by fsys.
func runAppenders(b *testing.B, n int, fsys *vfs.CountingFS, appendOne func() error) {
	b.SetBytes(int64(len(benchPayload)))
	syncs0 := fsys.Syncs.Load()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per, extra := b.N/n, b.N%n
	for g := 0; g < n; g++ {
		k := per
		if g < extra {
			k++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < k; i++ {
				if err := appendOne(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(fsys.Syncs.Load()-syncs0)/float64(b.N), "fsyncs/msg")
}

// BenchmarkReadSequential replays 1M 200-byte entries from offset 0 with
// ReadBatch (built once, outside the timer) and reports entries/s.
func BenchmarkReadSequential(b *testing.B) {
	const total = 1 << 20
	dir := filepath.Join(b.TempDir(), "bench")
	l, err := Open(dir, Options{Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	batch := make([][]byte, 4096)
	for i := range batch {
		batch[i] = benchPayload
	}
	for n := 0; n < total; n += len(batch) {
		if _, err := l.AppendBatch(context.Background(), batch, contract.Durable); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(total * int64(len(benchPayload)))
	b.ResetTimer()
	start := time.Now()
	read := 0
	for i := 0; i < b.N; i++ {
		for off := int64(0); off < total; {
			es, err := l.ReadBatch(off, 4096)
			if err != nil || len(es) == 0 {
				b.Fatalf("ReadBatch(%d): %d entries, %v", off, len(es), err)
			}
			off += int64(len(es))
			read += len(es)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(read)/el.Seconds(), "entries/s")
}

// BenchmarkCheckpointCommit measures one Commit (open, 8-byte write, fsync,
// close: a checkpoint holds no descriptor between commits) against the
// same write and fsync on a descriptor held open, which is what a commit
// cost before checkpoints stopped holding one. Compare the two ns/op of one
// run: the difference is the price of not holding a file per checkpoint.
func BenchmarkCheckpointCommit(b *testing.B) {
	b.Run("open-per-commit", func(b *testing.B) {
		c, err := OpenCheckpoint(vfs.OS{}, b.TempDir(), "bench", 1<<62, zap.NewNop())
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			if err := c.Commit(int64(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("held-descriptor", func(b *testing.B) {
		f, err := vfs.OS{}.Create(filepath.Join(b.TempDir(), "bench"+CheckpointExt))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		var buf [checkpointSize]byte
		for i := 0; i < b.N; i++ {
			binary.BigEndian.PutUint64(buf[:], uint64(i))
			if _, err := f.WriteAt(buf[:], 0); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAppendManyTopics: 64 topics, one appender each, sharing one
// segment cache. With a cache of 64 pairs every active segment stays open;
// with 8 the writers' pairs keep evicting each other, so most group commits
// reopen their active segment first. The msgs/s ratio of the two is the
// cost of running more busy topics than max-open-segments.
func BenchmarkAppendManyTopics(b *testing.B) {
	const topics = 64
	for _, capacity := range []int{topics, 8} {
		b.Run(fmt.Sprintf("cache=%d", capacity), func(b *testing.B) {
			fsys := vfs.NewCounting(vfs.OS{})
			cache := NewSegmentCache(capacity)
			root := b.TempDir()
			logs := make([]*Log, topics)
			for i := range logs {
				l, err := Open(filepath.Join(root, fmt.Sprintf("t%d", i)), Options{FS: fsys, Logger: zap.NewNop(), SegmentCache: cache})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				logs[i] = l
			}
			var turn atomic.Int64 // calls go round the topics
			runAppenders(b, topics, fsys, func() error {
				_, err := logs[turn.Add(1)%topics].Append(context.Background(), benchPayload, contract.Durable)
				return err
			})
			b.ReportMetric(float64(cache.opens.Load())/float64(b.N), "opens/msg")
		})
	}
}
