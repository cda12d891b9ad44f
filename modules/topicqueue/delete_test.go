package topicqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

const delRoot = "/data"

// topicImage is what a topic holds, to tell "whole" from anything else.
type topicImage struct {
	incarnation string
	messages    []string
	checkpoint  int64
}

// setupTopic makes topic t with n durable messages and the checkpoint d1
// committed at n/2, and returns its image.
func setupTopic(t *testing.T, reg *Registry, n int) topicImage {
	t.Helper()
	img := topicImage{checkpoint: int64(n / 2)}
	for i := 0; i < n; i++ {
		p := fmt.Sprintf(`{"topic":{"name":"t"},"content":%d}`, i)
		if _, _, err := reg.Publish(context.Background(), "t", [][]byte{[]byte(p)}, contract.Durable); err != nil {
			t.Fatal(err)
		}
		img.messages = append(img.messages, p)
	}
	q, _ := reg.Get("t")
	if err := q.Commit("d1", img.checkpoint); err != nil {
		t.Fatal(err)
	}
	img.incarnation = q.Incarnation()
	if len(img.incarnation) != 32 {
		t.Fatalf("incarnation %q: want 32 hex digits", img.incarnation)
	}
	return img
}

// recoverImage runs startup recovery (refusing corruption) on fsys and
// returns topic t's image, or nil when t is absent. It fails the test when
// recovery refuses anything or leaves a directory of a deletion behind.
func recoverImage(t testing.TB, fsys vfs.FS) *topicImage {
	t.Helper()
	reg := New(Options{Root: delRoot, Storage: storage.Options{FS: fsys}})
	defer reg.Close()
	if _, err := reg.OpenAll(OnCorruptionFail, zap.NewNop()); err != nil {
		t.Fatalf("recovery refused the data after a crash during deletion: %v", err)
	}
	ents, err := fsys.List(delRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if storage.IsDeletingDir(e.Name) {
			t.Fatalf("recovery left %s behind", e.Name)
		}
	}
	q, ok := reg.Get("t")
	if !ok {
		return nil
	}
	img := &topicImage{incarnation: q.Incarnation()}
	for off := int64(0); off < q.HighWatermark(); off++ {
		p, err := q.Read(off)
		if err != nil {
			t.Fatalf("read offset %d after recovery: %v", off, err)
		}
		img.messages = append(img.messages, string(p))
	}
	cp, err := q.Checkpoint("d1")
	if err != nil {
		t.Fatal(err)
	}
	img.checkpoint = cp.Offset()
	return img
}

// checkWholeOrAbsent fails unless got is nil or equal to want.
func checkWholeOrAbsent(t testing.TB, what string, got *topicImage, want topicImage) {
	t.Helper()
	if got == nil {
		return
	}
	if got.incarnation != want.incarnation || got.checkpoint != want.checkpoint ||
		strings.Join(got.messages, "\n") != strings.Join(want.messages, "\n") {
		t.Fatalf("%s: topic is neither whole nor absent: incarnation %s (want %s), %d messages (want %d), checkpoint %d (want %d)",
			what, got.incarnation, want.incarnation, len(got.messages), len(want.messages), got.checkpoint, want.checkpoint)
	}
}

// TestDeleteCrashAtEveryStep kills the deletion (simulated power loss:
// whatever was not fsynced is dropped) at each named step and before every
// filesystem operation it makes; after recovery the topic is whole or
// absent, never refused, and no renamed-aside directory is left.
func TestDeleteCrashAtEveryStep(t *testing.T) {
	fsys := vfs.NewMem()
	type snap struct {
		name  string
		fs    *vfs.MemFS
		whole bool // the only acceptable outcome at this point, when set
		gone  bool
	}
	var snaps []snap
	hooks := &storage.Hooks{}
	reg := New(Options{Root: delRoot, Storage: storage.Options{FS: fsys, Hooks: hooks}})
	defer reg.Close()
	want := setupTopic(t, reg, 50)
	// Power loss before the rename is durable: still whole.
	hooks.AfterTopicRename = func() {
		snaps = append(snaps, snap{name: "after-rename", fs: fsys.Crash(vfs.CrashOptions{}), whole: true})
	}
	// Once the data root is fsynced the topic is gone.
	hooks.AfterTopicRenameSync = func() {
		snaps = append(snaps, snap{name: "after-rename-sync", fs: fsys.Crash(vfs.CrashOptions{}), gone: true})
	}
	hooks.AfterTopicFileRemove = func() {
		snaps = append(snaps, snap{name: fmt.Sprintf("after-remove-%d", len(snaps)), fs: fsys.Crash(vfs.CrashOptions{}), gone: true})
	}
	rng := rand.New(rand.NewPCG(7, 7))
	fsys.SetHook(func(op vfs.Op, name string) error {
		snaps = append(snaps, snap{name: fmt.Sprintf("before-%s-%s", op, name), fs: fsys.Crash(vfs.CrashOptions{TornTail: true})})
		// And as disks fail: unsynced sectors kept old or new, in any order.
		for _, sector := range []int{512, 4096} {
			snaps = append(snaps, snap{name: fmt.Sprintf("before-%s-%s-sectors-%d", op, name, sector),
				fs: fsys.Crash(vfs.CrashOptions{SectorSize: sector, Rand: rng})})
		}
		return nil
	})
	if err := reg.Delete("t"); err != nil {
		t.Fatal(err)
	}
	fsys.SetHook(nil)
	snaps = append(snaps, snap{name: "after-delete", fs: fsys.Crash(vfs.CrashOptions{}), gone: true})
	var whole, absent int
	named := 0
	for _, s := range snaps {
		got := recoverImage(t, s.fs)
		checkWholeOrAbsent(t, s.name, got, want)
		switch {
		case s.whole && got == nil:
			t.Fatalf("%s: topic absent, want whole (the rename was not durable yet)", s.name)
		case s.gone && got != nil:
			t.Fatalf("%s: topic still there, want absent (the rename was durable)", s.name)
		}
		if s.whole || s.gone {
			named++
		}
		if got == nil {
			absent++
		} else {
			whole++
		}
	}
	if named < 4 || whole == 0 || absent == 0 {
		t.Fatalf("crash points not all reached: %d snapshots, %d named, %d whole, %d absent", len(snaps), named, whole, absent)
	}
	t.Logf("%d crash snapshots: %d whole, %d absent", len(snaps), whole, absent)
}

// TestInPlaceDeletionIsCaught is the negative control of
// TestDeleteCrashAtEveryStep: removing the topic's files where they are
// (no rename aside) and crashing midway leaves part of a topic, which the
// same check reports.
func TestInPlaceDeletionIsCaught(t *testing.T) {
	fsys := vfs.NewMem()
	reg := New(Options{Root: delRoot, Storage: storage.Options{FS: fsys, SegmentMaxBytes: 512}})
	want := setupTopic(t, reg, 50)
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(delRoot, "t")
	ents, err := fsys.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	caught := 0
	for _, e := range ents {
		if e.IsDir {
			continue
		}
		if err := fsys.Remove(filepath.Join(dir, e.Name)); err != nil {
			t.Fatal(err)
		}
		if err := fsys.SyncDir(dir); err != nil {
			t.Fatal(err)
		}
		crashed := fsys.Crash(vfs.CrashOptions{})
		ft := &fatalRecorder{TB: t}
		func() {
			defer func() { _ = recover() }()
			checkWholeOrAbsent(ft, "in place", recoverImage(ft, crashed), want)
		}()
		if ft.failed {
			caught++
		}
	}
	if caught == 0 {
		t.Fatal("removing a topic in place was never caught: the whole-or-absent check proves nothing")
	}
	t.Logf("in-place removal caught at %d of %d steps", caught, len(ents))
}

// fatalRecorder turns Fatalf into a recorded failure and a panic that the
// negative control recovers.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.failed = true
	panic(fmt.Sprintf(format, args...))
}

func (f *fatalRecorder) Fatal(args ...any) {
	f.failed = true
	panic(fmt.Sprint(args...))
}

// TestDeleteAndRecreate: a deleted topic is gone from the registry and the
// disk, checkpoints included; a publish creates it again from offset 0
// with a new incarnation id, which survives a restart.
func TestDeleteAndRecreate(t *testing.T) {
	fsys := vfs.NewMem()
	reg := New(Options{Root: delRoot, Storage: storage.Options{FS: fsys}})
	old := setupTopic(t, reg, 10)
	oldQ, _ := reg.Get("t")
	if err := reg.Delete("t"); err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.Get("t"); ok || len(reg.List()) != 0 {
		t.Fatal("deleted topic still listed")
	}
	if !oldQ.Deleted() {
		t.Fatal("old TopicQueue not marked deleted")
	}
	if _, err := oldQ.Log().Append(context.Background(), []byte(`{}`), contract.Durable); !errors.Is(err, contract.ErrClosed) {
		t.Fatalf("append to the deleted topic's log: %v, want ErrClosed", err)
	}
	ents, err := fsys.List(delRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir {
			t.Fatalf("data root still holds directory %s after the deletion", e.Name)
		}
	}
	q, off, err := reg.Publish(context.Background(), "t", [][]byte{[]byte(`{"topic":{"name":"t"},"content":"new"}`)}, contract.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if off != 0 || q.Incarnation() == old.incarnation || q.Incarnation() == "" {
		t.Fatalf("recreated topic: offset %d, incarnation %s (old %s): want offset 0 and a new id", off, q.Incarnation(), old.incarnation)
	}
	cp, err := q.Checkpoint("d1")
	if err != nil || cp.Offset() != 0 {
		t.Fatalf("recreated topic's checkpoint d1 = %d, %v: want 0 (checkpoints go with the topic)", cp.Offset(), err)
	}
	newID := q.Incarnation()
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	got := recoverImage(t, fsys)
	if got == nil || got.incarnation != newID || len(got.messages) != 1 {
		t.Fatalf("after restart: %+v, want incarnation %s and 1 message", got, newID)
	}
}

// TestDeleteErrors: an invalid name (nothing touches the disk), an unknown
// topic, a topic being created.
func TestDeleteErrors(t *testing.T) {
	fsys := vfs.NewMem()
	reg := New(Options{Root: delRoot, Storage: storage.Options{FS: fsys}})
	defer reg.Close()
	if err := reg.Delete("a..b"); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("invalid name: %v", err)
	}
	if err := reg.Delete("nope"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("unknown topic: %v", err)
	}
	if _, err := fsys.List(delRoot); !vfs.IsNotExist(err) {
		t.Fatalf("a refused deletion touched the disk: %v", err)
	}
	reached, release := slowCreate(fsys)
	defer release()
	done := make(chan error, 1)
	go func() { _, err := reg.GetOrCreate("slow"); done <- err }()
	<-reached
	if err := reg.Delete("slow"); !errors.Is(err, ErrTopicBusy) {
		t.Fatalf("delete while creating: %v, want ErrTopicBusy", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := reg.Delete("slow"); err != nil {
		t.Fatalf("delete once created: %v", err)
	}
}

// TestDeleteWaitsForSubscribers: deletion subscribers run while the topic
// is out of the registry and before its log closes.
func TestDeleteWaitsForSubscribers(t *testing.T) {
	reg := New(Options{Root: delRoot, Storage: storage.Options{FS: vfs.NewMem()}})
	defer reg.Close()
	setupTopic(t, reg, 3)
	var seen []string
	cancel := reg.SubscribeDeletes(func(q *TopicQueue) {
		_, listed := reg.Get(q.Name())
		// The log is still open: a checkpoint can be read.
		_, err := q.Checkpoint("d1")
		seen = append(seen, fmt.Sprintf("%s listed=%v cp-err=%v", q.Name(), listed, err))
	})
	defer cancel()
	if err := reg.Delete("t"); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != "t listed=false cp-err=<nil>" {
		t.Fatalf("subscriber saw %v", seen)
	}
}

// TestPublishesRacingDeletionNeverFail: publishers keep publishing while
// the topic is deleted again and again. Every publish is acknowledged
// (one that meets the closed log moves on to the topic created anew), and
// every acknowledgement on a deleted topic is below that topic's final
// high watermark: nothing was acknowledged into it after it closed. The
// last topic holds every message acknowledged into it.
func TestPublishesRacingDeletionNeverFail(t *testing.T) {
	reg := New(Options{Root: delRoot, Storage: storage.Options{FS: vfs.NewMem()}})
	defer reg.Close()
	if _, err := reg.GetOrCreate("t"); err != nil {
		t.Fatal(err)
	}
	type ack struct {
		q       *TopicQueue
		off     int64
		payload string
	}
	const publishers, each, deletions = 4, 200, 20
	acks := make(chan ack, publishers*each)
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := 0; p < publishers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				pl := fmt.Sprintf(`{"topic":{"name":"t"},"content":"%d-%d"}`, p, i)
				q, off, err := reg.Publish(context.Background(), "t", [][]byte{[]byte(pl)}, contract.Durable)
				if err != nil {
					errs <- err
					return
				}
				acks <- ack{q, off, pl}
			}
		}()
	}
	for d := 0; d < deletions; d++ {
		err := reg.Delete("t")
		if err != nil && !errors.Is(err, ErrUnknownTopic) && !errors.Is(err, ErrTopicBusy) {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(acks)
	close(errs)
	for err := range errs {
		t.Fatalf("a publish racing with deletions failed: %v", err)
	}
	deleted, n := 0, 0
	for a := range acks {
		n++
		if a.q.Deleted() {
			deleted++
			if a.off >= a.q.HighWatermark() {
				t.Fatalf("offset %d acknowledged into a deleted topic whose log ended at %d", a.off, a.q.HighWatermark())
			}
			continue
		}
		got, err := a.q.Read(a.off)
		if err != nil || string(got) != a.payload {
			t.Fatalf("offset %d: %q, %v; want %q", a.off, got, err, a.payload)
		}
	}
	if n != publishers*each {
		t.Fatalf("%d acknowledgements, want %d", n, publishers*each)
	}
	t.Logf("%d acknowledged: %d into topics deleted afterwards", n, deleted)
}

// gateBackend is the local backend whose first Append waits at a gate.
type gateBackend struct {
	*LocalBackend
	reached, gate chan struct{}
	once          sync.Once
}

func (b *gateBackend) Open(name string, create bool) (contract.Log, error) {
	l, err := b.LocalBackend.Open(name, create)
	if err != nil {
		return nil, err
	}
	return &gateLog{Log: l, b: b}, nil
}

type gateLog struct {
	contract.Log
	b *gateBackend
}

func (l *gateLog) Append(ctx context.Context, p []byte, lvl contract.AckLevel) (int64, error) {
	l.b.once.Do(func() {
		close(l.b.reached)
		<-l.b.gate
	})
	return l.Log.Append(ctx, p, lvl)
}

// TestPublishMeetingADeletionLandsInTheNewTopic: a publish that looked the
// topic up before a deletion and appends after the log closed is not
// acknowledged into the deleted topic and does not fail: it lands at
// offset 0 of the topic created anew.
func TestPublishMeetingADeletionLandsInTheNewTopic(t *testing.T) {
	fsys := vfs.NewMem()
	b := &gateBackend{LocalBackend: &LocalBackend{Root: delRoot, Storage: storage.Options{FS: fsys}},
		reached: make(chan struct{}), gate: make(chan struct{})}
	reg := New(Options{Root: delRoot, Storage: storage.Options{FS: fsys}, Backend: b})
	defer reg.Close()
	old, err := reg.GetOrCreate("t")
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		q   *TopicQueue
		off int64
		err error
	}
	done := make(chan res, 1)
	go func() {
		q, off, err := reg.Publish(context.Background(), "t", [][]byte{[]byte(`{"topic":{"name":"t"},"content":1}`)}, contract.Durable)
		done <- res{q, off, err}
	}()
	<-b.reached // the publish holds the old topic
	if err := reg.Delete("t"); err != nil {
		t.Fatal(err)
	}
	close(b.gate)
	r := <-done
	if r.err != nil {
		t.Fatalf("publish racing with the deletion failed: %v", r.err)
	}
	if r.q == old || r.q.Deleted() || r.off != 0 || old.HighWatermark() != 0 {
		t.Fatalf("publish landed in the deleted topic (same=%v deleted=%v offset=%d, old high watermark %d)",
			r.q == old, r.q.Deleted(), r.off, old.HighWatermark())
	}
}

// TestDeleteQuarantinedAndFailedDeletion: a topic refused by recovery can
// be deleted; a deletion whose rename fails leaves the topic whole on disk,
// reported as quarantined until a retried DELETE succeeds.
func TestDeleteQuarantinedAndFailedDeletion(t *testing.T) {
	fsys := vfs.NewMem()
	reg := New(Options{Root: delRoot, Storage: storage.Options{FS: fsys}})
	setupTopic(t, reg, 3)
	if _, _, err := reg.Publish(context.Background(), "u", [][]byte{[]byte(`{}`)}, contract.Durable); err != nil {
		t.Fatal(err)
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	// Garble t's incarnation file: recovery refuses t.
	if err := fsys.WriteFile(filepath.Join(delRoot, "t", storage.IncarnationFile), []byte("x\n"), true); err != nil {
		t.Fatal(err)
	}
	reg = New(Options{Root: delRoot, Storage: storage.Options{FS: fsys}})
	defer reg.Close()
	if _, err := reg.OpenAll(OnCorruptionQuarantine, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.Quarantined()["t"]; !ok {
		t.Fatal("t not quarantined")
	}
	if err := reg.Delete("t"); err != nil {
		t.Fatalf("delete a quarantined topic: %v", err)
	}
	if _, ok := reg.Quarantined()["t"]; ok {
		t.Fatal("t still quarantined after its deletion")
	}
	if _, err := fsys.List(filepath.Join(delRoot, "t")); !vfs.IsNotExist(err) {
		t.Fatalf("t's directory: %v, want gone", err)
	}

	// The rename fails: u stays whole on disk, refused until a retry.
	failRename := errors.New("injected rename failure")
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpRename && filepath.Base(name) == "u" {
			return failRename
		}
		return nil
	})
	if err := reg.Delete("u"); !errors.Is(err, failRename) {
		t.Fatalf("delete with a failing rename: %v", err)
	}
	if _, ok := reg.Quarantined()["u"]; !ok {
		t.Fatal("u, still stored after a failed deletion, is not reported")
	}
	if _, err := fsys.List(filepath.Join(delRoot, "u")); err != nil {
		t.Fatalf("u's directory after a failed deletion: %v, want whole", err)
	}
	fsys.SetHook(nil)
	if err := reg.Delete("u"); err != nil {
		t.Fatalf("retried delete: %v", err)
	}
	if len(reg.Quarantined()) != 0 || len(reg.List()) != 0 {
		t.Fatalf("after the deletions: quarantined %v, open %d", reg.Quarantined(), len(reg.List()))
	}
}
