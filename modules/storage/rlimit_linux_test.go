//go:build linux

package storage

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/zap"
)

// rlimitChildEnv marks the subprocess of TestManySegmentsUnderLowFileLimit.
const rlimitChildEnv = "MMMQ_STORAGE_RLIMIT_CHILD"

// TestManySegmentsUnderLowFileLimit: with the open-file limit lowered to
// 256 (in a subprocess, so no other test runs under it), a log on the real
// filesystem grows to 1,000 sealed segments — 2,000 files, far more than
// the limit — and appends, rotations, reads (Read and ReadBatch), Close, a
// reopen (repair of every segment) and appends after it all succeed.
func TestManySegmentsUnderLowFileLimit(t *testing.T) {
	if os.Getenv(rlimitChildEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestManySegmentsUnderLowFileLimit$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), rlimitChildEnv+"="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestManySegmentsUnderLowFileLimit")) {
			t.Fatalf("subprocess: %v\n%s", err, out)
		}
		return
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	const segments, perSegment = 1000, 4
	dir := filepath.Join(os.Getenv(rlimitChildEnv), "orders")
	// 4 entries of 264 bytes reach 1024: each segment holds 4.
	o := Options{Logger: zap.NewNop(), SegmentMaxBytes: 1024, MaxOpenSegments: 32}
	l, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	batch := make([][]byte, 40)
	next := 0
	appendBatch := func() {
		for i := range batch {
			batch[i] = payload(next+i, 256)
		}
		if _, err := l.AppendBatch(context.Background(), batch, Durable); err != nil {
			t.Fatalf("append batch at %d: %v", next, err)
		}
		next += len(batch)
	}
	for next < segments*perSegment {
		appendBatch()
	}
	if n := l.Stats().Segments; n < segments {
		t.Fatalf("%d segments, want %d", n, segments)
	}
	readBack := func() {
		t.Helper()
		hw := l.HighWatermark()
		for off := int64(0); off < hw; off += 3 {
			p, err := l.Read(off)
			if err != nil || !bytes.Equal(p, payload(int(off), 256)) {
				t.Fatalf("read %d: %.30q, %v", off, p, err)
			}
		}
		for _, e := range readAll(t, l, 7) {
			if !bytes.Equal(e.Payload, payload(int(e.Offset), 256)) {
				t.Fatalf("read batch: offset %d holds %.30q", e.Offset, e.Payload)
			}
		}
	}
	readBack()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(dir, o); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer l.Close()
	if got := l.HighWatermark(); got != int64(next) {
		t.Fatalf("reopened high watermark %d, want %d", got, next)
	}
	for i := 0; i < 5; i++ {
		appendBatch()
	}
	readBack()
}
