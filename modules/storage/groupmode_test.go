package storage

import (
	"errors"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// modePath is the .mode file of checkpoint "d".
var modePath = path.Join(finTopic, CheckpointDir, "d"+ModeExt)

func wantMode(t testing.TB, c *Checkpoint, want, what string) {
	t.Helper()
	got, err := c.GroupMode()
	if err != nil || got != want {
		t.Fatalf("%s: GroupMode() = %q, %v; want %q", what, got, err, want)
	}
}

func mustSetMode(t testing.TB, c *Checkpoint, mode string) {
	t.Helper()
	if err := c.SetGroupMode(mode); err != nil {
		t.Fatalf("SetGroupMode(%q): %v", mode, err)
	}
}

// TestGroupModeSetAndReopen: a group never used has no mode; the mode set
// is stored as exactly "shared\n" or "exclusive\n" and found after a power
// loss; setting the stored mode again writes nothing; another one replaces
// it; an unknown mode is refused; after Close both calls wrap ErrClosed.
func TestGroupModeSetAndReopen(t *testing.T) {
	fsys := finFS(t)
	c := openFin(t, fsys, 1000)
	wantMode(t, c, "", "a group never used")
	mustSetMode(t, c, contract.GroupShared)
	wantMode(t, c, contract.GroupShared, "after SetGroupMode")
	crashed := fsys.Crash(vfs.CrashOptions{})
	if b, err := crashed.ReadFile(modePath); err != nil || string(b) != "shared\n" {
		t.Fatalf("after a power loss %s holds %q, %v; want \"shared\\n\"", modePath, b, err)
	}
	wantMode(t, openFin(t, crashed, 1000), contract.GroupShared, "reopened after a power loss")
	if fileExists(crashed, modePath+vfs.TmpExt) {
		t.Fatal("SetGroupMode left its tmp file")
	}

	before := fsys.SyncCount()
	mustSetMode(t, c, contract.GroupShared)
	mustSetMode(t, openFin(t, fsys, 1000), contract.GroupShared)
	if fsys.SyncCount() != before {
		t.Fatal("setting the stored mode again wrote something")
	}
	mustSetMode(t, c, contract.GroupExclusive)
	if b, _ := fsys.Crash(vfs.CrashOptions{}).ReadFile(modePath); string(b) != "exclusive\n" {
		t.Fatalf("%s holds %q after SetGroupMode(exclusive), want \"exclusive\\n\"", modePath, b)
	}
	for _, bad := range []string{"", "Shared", "exclusive\n", "competing"} {
		if err := c.SetGroupMode(bad); err == nil {
			t.Errorf("SetGroupMode(%q) = nil, want an error", bad)
		}
	}
	wantMode(t, c, contract.GroupExclusive, "after refused modes")
	c.Close()
	if _, err := c.GroupMode(); !errors.Is(err, contract.ErrClosed) {
		t.Errorf("GroupMode after Close = %v, want contract.ErrClosed", err)
	}
	if err := c.SetGroupMode(contract.GroupShared); !errors.Is(err, contract.ErrClosed) {
		t.Errorf("SetGroupMode after Close = %v, want contract.ErrClosed", err)
	}
}

// TestGroupModeLegacyCheckpoint: a checkpoint stored without a mode file
// (a group from before modes existed, or a dispatcher) is exclusive, also
// after a reopen; SetGroupMode(exclusive) then writes the file.
func TestGroupModeLegacyCheckpoint(t *testing.T) {
	fsys := finFS(t)
	c := openFin(t, fsys, 1000)
	mustCommit(t, c, 7)
	wantMode(t, c, contract.GroupExclusive, "committed, no mode file")
	wantMode(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000), contract.GroupExclusive, "reopened")
	mustSetMode(t, c, contract.GroupExclusive)
	if b, _ := fsys.Crash(vfs.CrashOptions{}).ReadFile(modePath); string(b) != "exclusive\n" {
		t.Fatalf("%s holds %q, want the implied mode made explicit", modePath, b)
	}
}

// TestGroupModeInvalidFile: a mode file holding anything but exactly
// "shared\n" or "exclusive\n" is an error naming the file, from GroupMode
// and SetGroupMode alike (which leaves the file as it is): a mode is never
// guessed.
func TestGroupModeInvalidFile(t *testing.T) {
	for _, content := range []string{"", "shared", "exclusive", "SHARED\n", "shared\n\n", " shared\n", "shared\r\n", "\x00\x00\x00\x00\x00\x00\x00", strings.Repeat("x", 100)} {
		fsys := finFS(t)
		openFin(t, fsys, 1000)
		if err := fsys.MkdirAll(path.Join(finTopic, CheckpointDir)); err != nil {
			t.Fatal(err)
		}
		if err := fsys.WriteFile(modePath, []byte(content), true); err != nil {
			t.Fatal(err)
		}
		c := openFin(t, fsys, 1000)
		if m, err := c.GroupMode(); err == nil || !strings.Contains(err.Error(), modePath) {
			t.Errorf("GroupMode with %q in the file = %q, %v; want an error naming %s", content, m, err, modePath)
		}
		if err := c.SetGroupMode(contract.GroupShared); err == nil || !strings.Contains(err.Error(), modePath) {
			t.Errorf("SetGroupMode over %q = %v, want an error naming %s", content, err, modePath)
		}
		if b, _ := fsys.ReadFile(modePath); string(b) != content {
			t.Errorf("SetGroupMode changed an invalid mode file: %q, was %q", b, content)
		}
	}
}

// TestGroupModePowerLoss: a power loss at every filesystem operation of a
// SetGroupMode, under every crash model, leaves the old mode or the new
// one, never an error (no half-written file is read), for a group never
// used, a legacy checkpoint and a mode changed.
func TestGroupModePowerLoss(t *testing.T) {
	cases := []struct {
		name      string
		setup     func(t *testing.T, c *Checkpoint)
		old, mode string
	}{
		{"new group", func(*testing.T, *Checkpoint) {}, "", contract.GroupShared},
		{"legacy checkpoint", func(t *testing.T, c *Checkpoint) { mustCommit(t, c, 3) }, contract.GroupExclusive, contract.GroupShared},
		{"changed", func(t *testing.T, c *Checkpoint) { mustSetMode(t, c, contract.GroupShared) }, contract.GroupShared, contract.GroupExclusive},
	}
	seen := map[string]int{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for at := 1; ; at++ {
				done := false
				for mi, m := range finCrashModels {
					fsys := finFS(t)
					c := openFin(t, fsys, 1000)
					tc.setup(t, c)
					opts := m.opts
					opts.Rand = rand.New(rand.NewPCG(uint64(at), uint64(mi)))
					var ops int
					var snap *vfs.MemFS
					fsys.SetHook(func(vfs.Op, string) error {
						if ops++; ops == at && snap == nil {
							snap = fsys.Crash(opts)
						}
						return nil
					})
					mustSetMode(t, c, tc.mode)
					fsys.SetHook(nil)
					if snap == nil {
						done = true // past the last operation
						snap = fsys.Crash(opts)
					}
					c2, err := OpenCheckpoint(snap, finTopic, "d", 1000, zaptest.NewLogger(t))
					if err != nil {
						t.Fatal(err)
					}
					got, err := c2.GroupMode()
					switch {
					case err != nil:
						t.Fatalf("power loss at operation %d (%s): GroupMode: %v", at, m.name, err)
					case got != tc.old && got != tc.mode:
						t.Fatalf("power loss at operation %d (%s): mode %q, want %q or %q", at, m.name, got, tc.old, tc.mode)
					case done && got != tc.mode:
						t.Fatalf("power loss after SetGroupMode returned (%s): mode %q, want %q", m.name, got, tc.mode)
					}
					seen[got]++
				}
				if done {
					t.Logf("%d crash points × %d models", at, len(finCrashModels))
					break
				}
			}
		})
	}
	if seen[""] == 0 || seen[contract.GroupShared] == 0 || seen[contract.GroupExclusive] == 0 {
		t.Fatalf("modes seen after the power losses %v: want old and new ones", seen)
	}
}

// TestGroupModeListerAndRemove: the checkpoint lister lists names, once
// each (a group whose mode is stored is listed before its first commit: a
// shared group may have acks recorded and nothing committed); RemoveCheckpoint removes the .mode file and a leftover tmp
// durably, so that a group created again under the name has no mode.
func TestGroupModeListerAndRemove(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	defer l.Close()
	mustAppend(t, l, payload(1, 32))
	g, err := l.Checkpoint("g")
	if err != nil {
		t.Fatal(err)
	}
	mustSetMode(t, g, contract.GroupShared)
	mustCommit(t, g, 0)
	mustDeliver(t, g, dc(0, 2))
	onlyMode, err := l.Checkpoint("onlymode")
	if err != nil {
		t.Fatal(err)
	}
	mustSetMode(t, onlyMode, contract.GroupShared)
	names, err := l.Checkpoints()
	// A group whose mode is stored is listed before its first commit.
	if err != nil || !slices.Equal(names, []string{"g", "onlymode"}) {
		t.Fatalf("Checkpoints() = %v, %v; want [g onlymode]", names, err)
	}
	cdir := path.Join(testDir, CheckpointDir)
	if err := fsys.WriteFile(path.Join(cdir, "g"+ModeExt+vfs.TmpExt), []byte("x"), true); err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveCheckpoint("g"); err != nil {
		t.Fatal(err)
	}
	if got := rootEntries(t, fsys.Crash(vfs.CrashOptions{}), cdir); got != "onlymode"+ModeExt {
		t.Fatalf("after RemoveCheckpoint and a power loss the checkpoints directory holds %q, want only onlymode's file", got)
	}
	g2, err := l.Checkpoint("g")
	if err != nil {
		t.Fatal(err)
	}
	wantMode(t, g2, "", "created again")
	if len(g2.Deliveries()) != 0 {
		t.Fatalf("created again with counts %v", g2.Deliveries())
	}
}

// TestVerifyModeAndDeliveries: `mmmq verify` reports a .mode file that
// holds no mode and a damaged kind-2 record as checkpoint problems, and
// says nothing of sound ones or of a leftover .mode.tmp.
func TestVerifyModeAndDeliveries(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	for i := 0; i < 3; i++ {
		mustAppend(t, l, payload(i, 32))
	}
	c, err := l.Checkpoint("g")
	if err != nil {
		t.Fatal(err)
	}
	mustSetMode(t, c, contract.GroupShared)
	mustCommit(t, c, 1)
	for i := uint32(1); i <= 600; i++ {
		mustDeliver(t, c, dc(1+int64(i%2), int64(i)))
	}
	l.Close()
	verify := func() string {
		t.Helper()
		rep, err := Verify(testDir, Options{FS: fsys, Logger: zap.NewNop()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(rep.Checkpoints, "\n")
	}
	cdir := path.Join(testDir, CheckpointDir)
	fsys.WriteFile(path.Join(cdir, "g"+ModeExt+vfs.TmpExt), []byte("exclu"), true)
	if got := verify(); got != "" {
		t.Fatalf("verify of sound files: %q, want no problem", got)
	}
	mp := path.Join(cdir, "g"+ModeExt)
	fsys.WriteFile(mp, []byte("shard\n"), true)
	if got := verify(); !strings.Contains(got, "g.mode: invalid content") {
		t.Fatalf("verify of a bad mode file: %q", got)
	}
	fsys.WriteFile(mp, []byte("exclusive\n"), true)

	fp := path.Join(cdir, "g"+FinishedExt)
	good, _ := fsys.ReadFile(fp)
	bad := slices.Clone(good)
	bad[FinishedHeaderSize+3] ^= 0xff
	fsys.WriteFile(fp, bad, true)
	if got := verify(); !strings.Contains(got, "corrupt record at byte 0") || !strings.Contains(got, "crc mismatch") {
		t.Fatalf("verify of a damaged first kind-2 record: %q", got)
	}
	bad = slices.Clone(good)
	bad[len(bad)-2] ^= 0xff
	fsys.WriteFile(fp, bad, true)
	if got := verify(); !strings.Contains(got, "torn last append") {
		t.Fatalf("verify of a torn last kind-2 record: %q", got)
	}
	fsys.WriteFile(fp, slices.Concat(encodeDeliveries(dc(1, 2, 3, 1))...), true)
	if got := verify(); !strings.Contains(got, "delivery counts up to offset 3 at or beyond log end 3") {
		t.Fatalf("verify of a count past the log's end: %q", got)
	}
}
