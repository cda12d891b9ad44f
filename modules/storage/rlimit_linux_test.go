//go:build linux

package storage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// rlimitChildEnv marks the subprocess of a test run by underFileLimit; its
// value is the directory the child works in.
const rlimitChildEnv = "MMMQ_STORAGE_RLIMIT_CHILD"

// underFileLimit runs the calling test again in a subprocess whose
// open-file limit is lowered to limit (so no other test runs under it) and
// fails when the child fails. In the child it lowers the limit and returns
// the child's work directory with true: the test goes on there. In the
// parent it returns false once the child passed.
func underFileLimit(t *testing.T, limit uint64) (string, bool) {
	t.Helper()
	if dir := os.Getenv(rlimitChildEnv); dir != "" {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		lim.Cur = limit
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		return dir, true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), rlimitChildEnv+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("subprocess with the open-file limit at %d: %v\n%s", limit, err, out)
	}
	return "", false
}

// TestManySegmentsUnderLowFileLimit: with the open-file limit lowered to
// 256, a log on the real filesystem grows to 1,000 sealed segments — 2,000
// files, far more than the limit — and appends, rotations, reads (Read and
// ReadBatch), Close, a reopen (repair of every segment) and appends after
// it all succeed.
func TestManySegmentsUnderLowFileLimit(t *testing.T) {
	root, child := underFileLimit(t, 256)
	if !child {
		return
	}
	const segments, perSegment = 1000, 4
	dir := filepath.Join(root, "orders")
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
		if _, err := l.AppendBatch(context.Background(), batch, contract.Durable); err != nil {
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

// TestManyTopicsUnderLowFileLimit: with the open-file limit lowered to 256,
// 1,000 topics on the real filesystem, all open at once and sharing one
// segment cache of 32 pairs, each take appends and a checkpoint commit in
// two rounds — 3,000 files, which a descriptor per file would need 12 times
// the limit for — then every entry and checkpoint reads back, the logs
// close, and reopened they hold the same high watermarks and checkpoints.
func TestManyTopicsUnderLowFileLimit(t *testing.T) {
	root, child := underFileLimit(t, 256)
	if !child {
		return
	}
	const topics = 1000
	cache := NewSegmentCache(32)
	o := Options{Logger: zap.NewNop(), SegmentCache: cache}
	open := func() []*Log {
		logs := make([]*Log, topics)
		for i := range logs {
			l, err := Open(filepath.Join(root, fmt.Sprintf("topic-%04d", i)), o)
			if err != nil {
				t.Fatalf("open topic %d: %v", i, err)
			}
			logs[i] = l
		}
		return logs
	}
	logs := open()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ { // 8 producers share out the topics
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < 2; round++ {
				for i := w; i < topics; i += 8 {
					if err := appendAndCommit(logs[i], i, round); err != nil {
						t.Errorf("topic %d round %d: %v", i, round, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	check := func(logs []*Log) {
		t.Helper()
		for i, l := range logs {
			if hw := l.HighWatermark(); hw != 2 {
				t.Fatalf("topic %d: high watermark %d, want 2", i, hw)
			}
			for off := int64(0); off < 2; off++ {
				if p, err := l.Read(off); err != nil || !bytes.Equal(p, payload(i*2+int(off), 100)) {
					t.Fatalf("topic %d offset %d: %.30q, %v", i, off, p, err)
				}
			}
			c, err := l.Checkpoint("billing")
			if err != nil || c.Offset() != 2 {
				t.Fatalf("topic %d checkpoint: %v, %v", i, c, err)
			}
		}
	}
	check(logs)
	closeAll := func(logs []*Log) {
		for _, l := range logs {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	closeAll(logs)
	logs = open()
	defer closeAll(logs)
	check(logs)
}

// appendAndCommit appends topic i's entry of this round and commits its
// checkpoint past it.
func appendAndCommit(l *Log, i, round int) error {
	off, err := l.Append(context.Background(), payload(i*2+round, 100), contract.Durable)
	if err != nil {
		return err
	}
	c, err := l.Checkpoint("billing")
	if err != nil {
		return err
	}
	return c.Commit(off + 1)
}
