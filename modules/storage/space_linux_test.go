//go:build linux

package storage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/storage/vfs/vfstest"
)

// TestSpaceGuardOnRealTmpfs runs the guard on a real 8 MiB tmpfs (statfs,
// real files, real ENOSPC underneath): with min-free-bytes 2 MiB, DURABLE
// appends of 4 KiB are refused with a *LowSpaceError while statfs still
// shows at least min-free - slack bytes; the log never fails; after an
// operator removes a file, appends are accepted again on the same open
// log; a reopen (startup repair) finds exactly the acknowledged entries.
func TestSpaceGuardOnRealTmpfs(t *testing.T) {
	const size, minFree = 8 << 20, 2 << 20
	mnt := vfstest.MountTmpfs(t, size)
	// An operator's file taking 2 MiB, removed later to free space.
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	g := NewSpaceGuard(SpaceGuardOptions{Dir: mnt, MinFree: minFree, Now: clock.Now, Logger: zaptest.NewLogger(t)})
	opts := Options{FS: vfs.OS{}, Logger: zaptest.NewLogger(t), SegmentMaxBytes: 256 << 10, SpaceGuard: g}
	dir := filepath.Join(mnt, "orders")
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { l.Close() }()

	var acked [][]byte
	var refusal error
	for i := 0; i < 10_000; i++ {
		p := payload(i, 4096)
		if _, err := l.Append(context.Background(), p, contract.Durable); err != nil {
			refusal = err
			break
		}
		acked = append(acked, p)
	}
	var lse *LowSpaceError
	if !errors.As(refusal, &lse) {
		t.Fatalf("first error %v, want a *LowSpaceError (the guard must refuse before the disk is full)", refusal)
	}
	free, err := vfs.OS{}.FreeSpace(mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tmpfs %d bytes, min-free %d: refused after %d acks (%d bytes each) with %d bytes free; %d statfs calls",
		size, minFree, len(acked), len(acked[0]), free, g.Stats().Samples)
	if free < minFree/2 || l.Err() != nil {
		t.Fatalf("%d bytes free at the refusal, log error %v: want >= %d free and a healthy log", free, l.Err(), minFree/2)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	clock.Advance(DefaultSpaceCheckInterval)
	for i := 0; i < 10; i++ {
		p := payload(50_000+i, 4096)
		off, err := l.Append(context.Background(), p, contract.Durable)
		if err != nil || off != int64(len(acked)) {
			t.Fatalf("append after space was freed: %d, %v; want offset %d", off, err, len(acked))
		}
		acked = append(acked, p)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Repair().Clean() || l.HighWatermark() != int64(len(acked)) {
		t.Fatalf("reopen: hw %d, acked %d, repair %+v", l.HighWatermark(), len(acked), l.Repair())
	}
	for i, e := range readAll(t, l, 64) {
		if !bytes.Equal(e.Payload, acked[i]) {
			t.Fatalf("offset %d differs", i)
		}
	}
}
