package storage

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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
