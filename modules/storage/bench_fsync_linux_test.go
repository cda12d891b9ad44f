package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// BenchmarkFsyncCost measures what one durable write costs on this machine,
// in wall time and in CPU time of this process (getrusage, user+system),
// for the shape of one group commit of ~40 entries (10 KiB):
//
//   - append+fsync: what the segment file gets today (the file grows, so
//     the inode is written too);
//
//   - overwrite+fdatasync: the same bytes into a preallocated, already
//     written region (no size change, data only) — what a preallocated
//     segment format would allow; this format does not (segments hold exactly
//     their entries), so this is a measurement for that decision, not a
//     code path.
//
//     go test -run '^$' -bench FsyncCost ./modules/storage/
func BenchmarkFsyncCost(b *testing.B) {
	buf := make([]byte, 10<<10)
	for i := range buf {
		buf[i] = byte('a' + i%26)
	}
	run := func(b *testing.B, prealloc bool) {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "f"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if prealloc {
			zero := make([]byte, len(buf)*b.N)
			if _, err := f.Write(zero); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
		cpu0 := processCPUTime(b)
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			if _, err := f.WriteAt(buf, int64(i*len(buf))); err != nil {
				b.Fatal(err)
			}
			if prealloc {
				err = syscall.Fdatasync(int(f.Fd()))
			} else {
				err = f.Sync()
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		wall := time.Since(start)
		b.StopTimer()
		cpu := processCPUTime(b) - cpu0
		b.ReportMetric(float64(wall.Microseconds())/float64(b.N), "wall-us/op")
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
	}
	b.Run("append+fsync", func(b *testing.B) { run(b, false) })
	b.Run("overwrite+fdatasync", func(b *testing.B) { run(b, true) })
}

func processCPUTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAppendPrealloc compares group commits with preallocation off
// and on (Options.Preallocate 1, 4 — the default of
// mmmq.broker.storage.preallocate — and 16 MiB ahead) in one run: 16 DURABLE appenders of
// 200-byte entries, both index-sync modes, on the real filesystem. Per
// group commit it reports the CPU time this process spent inside fsync
// and fdatasync calls (getrusage(RUSAGE_THREAD) around each call, the
// goroutine locked to its thread for it; the preallocating goroutine's
// fsyncs of its zero chunks included), their wall time, and the process's
// whole CPU time; and msgs/s. Compare the off and on lines of the same
// run (the ratios are the result; absolute figures move with the disk
// and the neighbours):
//
//	go test -run '^$' -bench AppendPrealloc -count 3 ./modules/storage/
func BenchmarkAppendPrealloc(b *testing.B) {
	for _, mode := range []IndexSync{IndexSyncCommit, IndexSyncLazy} {
		for _, pre := range []int64{0, 1 << 20, DefaultPreallocate, 16 << 20} {
			name := "off"
			if pre > 0 {
				name = fmt.Sprintf("%dMiB", pre>>20)
			}
			b.Run(fmt.Sprintf("index-sync=%s/preallocate=%s", mode, name), func(b *testing.B) {
				fsys := &cpuFS{FS: vfs.OS{}}
				counting := vfs.NewCounting(fsys)
				l, err := Open(filepath.Join(b.TempDir(), "bench"), Options{FS: counting, Logger: zap.NewNop(), IndexSync: mode, Preallocate: pre})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				cpu0 := processCPUTime(b)
				st0 := l.Stats()
				runAppenders(b, 16, counting, func() error {
					_, err := l.Append(context.Background(), benchPayload, contract.Durable)
					return err
				})
				cpu := processCPUTime(b) - cpu0
				st := l.Stats()
				commits := float64(st.Batches - st0.Batches)
				b.ReportMetric(float64(fsys.cpu.Load())/1e3/commits, "fsync-cpu-us/commit")
				b.ReportMetric(float64(fsys.wall.Load())/1e3/commits, "fsync-wall-us/commit")
				b.ReportMetric(float64(cpu.Microseconds())/commits, "cpu-us/commit")
				b.ReportMetric(float64(st.Datasyncs-st0.Datasyncs)/float64(st.Fsyncs-st0.Fsyncs), "datasync-share")
				b.ReportMetric(float64(b.N)/commits, "msgs/commit")
			})
		}
	}
}

// cpuFS measures the CPU (RUSAGE_THREAD) and wall time of every Sync and
// Datasync of the files it opens.
type cpuFS struct {
	vfs.FS
	cpu, wall atomic.Int64 // nanoseconds
}

func (c *cpuFS) Create(name string) (vfs.File, error) { return c.wrap(c.FS.Create(name)) }
func (c *cpuFS) OpenRW(name string) (vfs.File, error) { return c.wrap(c.FS.OpenRW(name)) }
func (c *cpuFS) Open(name string) (vfs.File, error)   { return c.wrap(c.FS.Open(name)) }

func (c *cpuFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &cpuFile{File: f, fs: c}, nil
}

type cpuFile struct {
	vfs.File
	fs *cpuFS
}

func (f *cpuFile) Sync() error     { return f.measure(f.File.Sync) }
func (f *cpuFile) Datasync() error { return f.measure(f.File.Datasync) }

func (f *cpuFile) measure(sync func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var r0, r1 syscall.Rusage
	_ = syscall.Getrusage(1, &r0) // RUSAGE_THREAD
	start := time.Now()
	err := sync()
	f.fs.wall.Add(int64(time.Since(start)))
	_ = syscall.Getrusage(1, &r1)
	f.fs.cpu.Add(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
	return err
}

// BenchmarkFdatasyncPair measures what the two fdatasyncs of one
// preallocated commit-mode group commit cost on this disk, for one small
// group (a 270-byte entry and its 8-byte index entry, each overwriting
// zeros that were written and fsynced beforehand). Every iteration runs
// three shapes one after the other, so that the disk's noise hits them
// alike, and reports each one's mean wall time:
//
//   - segment-us: the segment's write and fdatasync alone (what lazy
//     mode does per group commit, and the floor of any durable append);
//
//   - sequential-us: write and fdatasync the segment, then write and
//     fdatasync the index (the order commit mode keeps: no index entry is
//     written before the bytes it points at are durable);
//
//   - together-us: write both, then fdatasync both at once from two
//     goroutines and wait for both (an order the repair rules do not
//     allow, see the package documentation; measured only to know what it
//     would save).
//
//     go test -run '^$' -bench FdatasyncPair -benchtime 2000x -count 3 ./modules/storage/
func BenchmarkFdatasyncPair(b *testing.B) {
	entry := make([]byte, 270)
	for i := range entry {
		entry[i] = byte('a' + i%26)
	}
	pos := make([]byte, IndexEntrySize)
	open := func(name string, size int) *os.File {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), name), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		if _, err := f.Write(make([]byte, size)); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		return f
	}
	datasync := func(f *os.File) {
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			b.Error(err)
		}
	}
	write := func(f *os.File, p []byte, at int) {
		if _, err := f.WriteAt(p, int64(at*len(p))); err != nil {
			b.Fatal(err)
		}
	}
	mmm := open("segment", 3*len(entry)*b.N)
	idx := open("index", 3*len(pos)*b.N)
	var alone, sequential, together time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		at := 3 * i
		start := time.Now()
		write(mmm, entry, at)
		datasync(mmm)
		alone += time.Since(start)

		start = time.Now()
		write(mmm, entry, at+1)
		datasync(mmm)
		write(idx, pos, at+1)
		datasync(idx)
		sequential += time.Since(start)

		start = time.Now()
		write(mmm, entry, at+2)
		write(idx, pos, at+2)
		done := make(chan struct{})
		go func() {
			datasync(idx)
			close(done)
		}()
		datasync(mmm)
		<-done
		together += time.Since(start)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(alone.Microseconds())/n, "segment-us")
	b.ReportMetric(float64(sequential.Microseconds())/n, "sequential-us")
	b.ReportMetric(float64(together.Microseconds())/n, "together-us")
}
