package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/schedule"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// noTarget takes no message: the stores built here are never moved.
type noTarget struct{}

func (noTarget) Append(context.Context, string, []byte) error { return nil }

// schedFixture is a data root with topic t (3 entries) and a scheduled
// store of n acknowledged scheduled messages of stored bytes each, due an
// hour after the fixed clock, all in one bucket file: its path.
func schedFixture(t *testing.T, n, stored int) (root, file string) {
	t.Helper()
	root, _ = fixture(t, 3)
	now := time.UnixMilli(1_800_000_000_000)
	s := schedule.New(schedule.Options{FS: vfs.OS{}, Dir: filepath.Join(root, contract.ScheduledDir), BucketWidth: 24 * time.Hour,
		Now: func() time.Time { return now }}, noTarget{})
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	msg := []byte(`{"x":"` + strings.Repeat("a", stored) + `"}`)
	for range n {
		if _, err := s.Schedule(context.Background(), "t", msg, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, contract.ScheduledDir, "*.sched"))
	if len(files) != 1 {
		t.Fatalf("bucket files %v, want one", files)
	}
	return root, files[0]
}

// flipByte flips the byte at i of the file at path.
func flipByte(t *testing.T, path string, i int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[i] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// schedLines decodes verify --json's stdout and returns the scheduled
// store's lines by name (every other line must be a topic's report).
func schedLines(t *testing.T, out string) map[string]schedReport {
	t.Helper()
	got := map[string]schedReport{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r schedReport
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if strings.HasPrefix(line, `{"topic":".scheduled`) {
			if err := dec.Decode(&r); err != nil {
				t.Fatalf("line %s: %v", line, err)
			}
			got[r.Topic] = r
			continue
		}
		decodeReports(t, line)
	}
	return got
}

// verify checks the scheduled store: the user's trial (3 acknowledged
// scheduled messages, byte 20 of their file flipped) is TORN_TAIL naming
// the 2 records after the damage that pass their CRC, both pending, which
// the broker's start drops; exit 0 as for a topic's torn tail. The file
// is left as it is, --repair too. The store is never SKIPPED.
func TestVerifyScheduledTornTail(t *testing.T) {
	root, file := schedFixture(t, 3, 20)
	flipByte(t, file, 20)
	before, _ := os.ReadFile(file)
	name := filepath.Join(contract.ScheduledDir, filepath.Base(file))
	code, out, stderr := captureAll(t, "verify", "--root", root)
	for _, want := range []string{
		".scheduled                               TORN_TAIL scheduled messages: bucket-files=1 records=0 pending=0 bytes=" + fmt.Sprint(len(before)) + " (1 with a torn tail, 0 corrupt",
		fmt.Sprintf("%-40s TORN_TAIL the broker's start cuts ", name) + fmt.Sprint(len(before)) + " bytes at byte 0, 3 records (1 damaged): 2 records after the damage pass their CRC, 2 of them pending scheduled messages: the cut drops them",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if code != 0 || strings.Contains(out, "SKIPPED") || !strings.Contains(stderr, "scheduled messages (.scheduled): 1 bucket files, 1 with a torn tail, 0 corrupt") {
		t.Errorf("exit %d (want 0, as for a topic's torn tail), stderr %q", code, stderr)
	}
	if t.Failed() {
		t.Fatalf("output:\n%s", out)
	}
	code, out = capture(t, "verify", "--root", root, "--json")
	lines := schedLines(t, out)
	sum, f := lines[contract.ScheduledDir], lines[name]
	if code != 0 || sum.Status != schedule.StatusTornTail || sum.Files != 1 || sum.TornTails != 1 ||
		f.Status != schedule.StatusTornTail || f.Cut == nil ||
		*f.Cut != (schedule.Tail{At: 0, Bytes: int64(len(before)), Records: 3, Valid: 2, Pending: 2, Damaged: 1}) {
		t.Fatalf("--json: exit %d, lines %+v, cut %+v", code, lines, f.Cut)
	}
	code, out = capture(t, "verify", "--root", root, "--repair")
	if after, _ := os.ReadFile(file); code != 0 || !bytes.Equal(after, before) || !strings.Contains(out, "--repair leaves it to the broker's start") {
		t.Fatalf("--repair: exit %d, file changed %v, output:\n%s", code, !bytes.Equal(after, before), out)
	}
}

// A clean store is OK with its counts, one line; no damaged-file line.
func TestVerifyScheduledOK(t *testing.T) {
	root, file := schedFixture(t, 3, 20)
	b, _ := os.ReadFile(file)
	code, out := capture(t, "verify", "--root", root)
	want := fmt.Sprintf(".scheduled                               OK scheduled messages: bucket-files=1 records=3 pending=3 bytes=%d\n", len(b))
	if code != 0 || !strings.Contains(out, want) || strings.Count(out, ".scheduled") != 1 {
		t.Fatalf("exit %d, output %q; want exit 0 and %q", code, out, want)
	}
	code, out = capture(t, "verify", "--root", root, "--json")
	sum := schedLines(t, out)[contract.ScheduledDir]
	if code != 0 || sum.Status != schedule.StatusOK || sum.Records != 3 || sum.Pending != 3 || sum.Files != 1 {
		t.Fatalf("--json: exit %d, %+v", code, sum)
	}
}

// Damage with a valid record more than a crash's reach after it (26
// records of 100 KiB, byte 20 flipped) is CORRUPT, exit 3: the broker
// refuses to start.
func TestVerifyScheduledCorrupt(t *testing.T) {
	root, file := schedFixture(t, 26, 100<<10)
	flipByte(t, file, 20)
	before, _ := os.ReadFile(file)
	name := filepath.Join(contract.ScheduledDir, filepath.Base(file))
	code, out, stderr := captureAll(t, "verify", "--root", root)
	if code != 3 || !strings.Contains(out, ".scheduled                               CORRUPT scheduled messages: bucket-files=1") ||
		!strings.Contains(out, fmt.Sprintf("%-40s CORRUPT at %s byte 0: damaged record with a valid record at byte ", name, file)) ||
		!strings.Contains(out, "the broker refuses to start") || !strings.Contains(stderr, "0 with a torn tail, 1 corrupt") {
		t.Fatalf("exit %d (want 3), output:\n%s\nstderr %q", code, out, stderr)
	}
	code, out = capture(t, "verify", "--root", root, "--json")
	f := schedLines(t, out)[name]
	if code != 3 || f.Status != schedule.StatusCorrupt || f.Corruption == nil || f.Corruption.Pos != 0 || f.Corruption.ValidAt < 2<<20 {
		t.Fatalf("--json: exit %d, %+v", code, f)
	}
	if after, _ := os.ReadFile(file); !bytes.Equal(after, before) {
		t.Fatal("verify changed the file")
	}
}
