package loadgen

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// The disk modes measure the data filesystem itself, with no broker: the
// floor every durable publish stands on, in the same run as the broker's
// figures. One writer, one record of -size bytes per operation, each made
// durable before the next:
//
//   - disk-append: append to a growing file, then fsync(2) — what a segment
//     without preallocation costs (the file's size changes every time, so
//     the filesystem's journal commits metadata on every sync);
//   - disk-overwrite: overwrite bytes of a file already filled with written
//     zeros and made durable, then fdatasync(2) — what a preallocated
//     segment costs (no size or allocation change to flush).
//
// The file lives in -dir (the broker's data filesystem: the figure belongs
// to that filesystem) and is removed afterwards.
const (
	diskAppend    = "disk-append"
	diskOverwrite = "disk-overwrite"
)

// diskPrealloc is how much disk-overwrite writes ahead: it wraps to the
// start at the end, rewriting blocks that are already allocated.
const diskPrealloc = 64 << 20

func isDisk(mode string) bool { return mode == diskAppend || mode == diskOverwrite }

// validateDisk checks the flags of the disk modes.
func (c *benchConfig) validateDisk() error {
	if !isDisk(c.mode) {
		return nil
	}
	if c.producers != 1 {
		return fmt.Errorf("-c %d: the disk modes have one writer (-c 1)", c.producers)
	}
	if c.size < 1 || c.size > diskPrealloc {
		return fmt.Errorf("-size %d: the disk modes write 1..%d bytes per operation", c.size, diskPrealloc)
	}
	st, err := os.Stat(c.dir)
	if err != nil {
		return fmt.Errorf("-dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("-dir %s: not a directory", c.dir)
	}
	return nil
}

// runDisk runs disk-append or disk-overwrite for -warmup + -duration (or
// -count operations) and reports operations as messages: msgs/s, latency
// per durable write, and this process's CPU time per operation (Linux).
func runDisk(ctx context.Context, cfg benchConfig) (res *benchResult, err error) {
	f, path, err := diskFile(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", path, cerr)
		}
		if rerr := os.Remove(path); err == nil && rerr != nil {
			err = fmt.Errorf("remove %s: %w", path, rerr)
		}
	}()
	rec := make([]byte, cfg.size)
	if _, err := rand.Read(rec); err != nil {
		return nil, err
	}
	op := func(pos int64) error {
		if _, err := f.WriteAt(rec, pos); err != nil {
			return err
		}
		if cfg.mode == diskOverwrite {
			return f.Datasync()
		}
		return f.Sync()
	}
	res = &benchResult{Mode: cfg.mode, URL: cfg.dir, Producers: 1, Size: cfg.size, Topics: 1}
	var h latencyHistogram
	var pos int64
	start := time.Now()
	measureFrom, until := start.Add(cfg.warmup), start.Add(cfg.warmup+cfg.duration)
	if cfg.count > 0 {
		measureFrom, until = start, time.Time{}
	}
	measuring := !measureFrom.After(start)
	cpu0, cpuErr := processCPU(os.Getpid())
	for {
		if ctx.Err() != nil {
			break
		}
		now := time.Now()
		if !measuring && !now.Before(measureFrom) {
			measuring, measureFrom = true, now
			cpu0, cpuErr = processCPU(os.Getpid())
		}
		if cfg.count > 0 && res.Messages >= cfg.count || !until.IsZero() && !now.Before(until) {
			break
		}
		if cfg.mode == diskOverwrite && pos+int64(cfg.size) > diskPrealloc {
			pos = 0
		}
		if err := op(pos); err != nil {
			return nil, fmt.Errorf("%s: write and sync %s at %d: %w", cfg.mode, path, pos, err)
		}
		pos += int64(cfg.size)
		if measuring {
			h.Record(time.Since(now))
			res.Messages++
		}
	}
	end := time.Now()
	res.Requests = res.Messages
	res.Seconds = end.Sub(measureFrom).Seconds()
	if res.Seconds > 0 {
		res.MsgsPerSec = float64(res.Messages) / res.Seconds
	}
	res.P50Ms, res.P99Ms, res.P999Ms, res.MaxMs = ms(h.Quantile(0.50)), ms(h.Quantile(0.99)), ms(h.Quantile(0.999)), ms(h.Max())
	if cpu1, err := processCPU(os.Getpid()); err == nil && cpuErr == nil && res.Messages > 0 {
		us := float64((cpu1 - cpu0).Microseconds()) / float64(res.Messages)
		res.ServerCPUUsPerMsg = &us
	}
	if res.Messages == 0 {
		return res, errors.New("no operation was measured (the run ended before -warmup did)")
	}
	return res, nil
}

// diskFile creates the file the run writes in cfg.dir: empty for
// disk-append; for disk-overwrite diskPrealloc bytes of written zeros,
// fsynced, with the directory synced, so that the run changes no metadata.
func diskFile(cfg benchConfig) (vfs.File, string, error) {
	path := filepath.Join(cfg.dir, fmt.Sprintf(".mmmq-bench-%s-%d.tmp", cfg.mode, os.Getpid()))
	fsys := vfs.OS{}
	f, err := fsys.Create(path)
	if err != nil {
		return nil, "", fmt.Errorf("create %s: %w", path, err)
	}
	fail := func(err error) (vfs.File, string, error) {
		f.Close()
		os.Remove(path)
		return nil, "", err
	}
	if cfg.mode == diskOverwrite {
		zeros := make([]byte, 1<<20)
		for off := int64(0); off < diskPrealloc; off += int64(len(zeros)) {
			if _, err := f.WriteAt(zeros, off); err != nil {
				return fail(fmt.Errorf("preallocate %s: %w", path, err))
			}
		}
		if err := f.Sync(); err != nil {
			return fail(fmt.Errorf("fsync %s: %w", path, err))
		}
	}
	if err := fsys.SyncDir(cfg.dir); err != nil {
		return fail(fmt.Errorf("sync directory %s: %w", cfg.dir, err))
	}
	return f, path, nil
}
