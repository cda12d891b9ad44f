package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// capture runs the CLI in-process and returns its exit code and stdout.
func capture(t *testing.T, args ...string) (int, string) {
	t.Helper()
	code, out, _ := captureAll(t, args...)
	return code, out
}

// captureAll runs the CLI in-process and returns its exit code, stdout
// and stderr (both read while it runs, so a long output cannot block it).
func captureAll(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	oldOut, oldErr := os.Stdout, os.Stderr
	outR, outW := pipe(t)
	errR, errW := pipe(t)
	os.Stdout, os.Stderr = outW, errW
	outC, errC := readAllAsync(outR), readAllAsync(errR)
	code = run(args)
	os.Stdout, os.Stderr = oldOut, oldErr
	outW.Close()
	errW.Close()
	return code, <-outC, <-errC
}

func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	return r, w
}

// readAllAsync reads r to its end in a goroutine and sends what it read.
func readAllAsync(r *os.File) <-chan string {
	done := make(chan string, 1)
	go func() {
		defer r.Close()
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	return done
}

// fixture writes topic "t" with n messages under a new root.
func fixture(t *testing.T, n int) (root, seg string) {
	t.Helper()
	root = t.TempDir()
	l, err := storage.Open(filepath.Join(root, "t"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := l.Append(context.Background(), []byte(fmt.Sprintf(`{"i":%d}`, i)), contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return root, filepath.Join(root, "t", storage.SegmentName(0)+storage.SegmentExt)
}

// decodeReports decodes the whole of verify --json's stdout as a stream
// of JSON reports; anything else in it fails the test.
func decodeReports(t *testing.T, out string) []storage.TopicReport {
	t.Helper()
	var reps []storage.TopicReport
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	for {
		var rep storage.TopicReport
		err := dec.Decode(&rep)
		if err == io.EOF {
			return reps
		}
		if err != nil {
			t.Fatalf("verify --json output is not JSON records only (%v):\n%s", err, out)
		}
		reps = append(reps, rep)
	}
}

func size(t *testing.T, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// With the JetStream backend configured, verify and dump have no data
// directory to read: they say so (exit 2) unless --root names one.
func TestVerifyDumpRefuseJetStream(t *testing.T) {
	cfg := writeConfig(t, "mmmq:\n  broker:\n    storage:\n      backend: jetstream\n")
	for _, args := range [][]string{{"verify", "--config", cfg}, {"dump", "--config", cfg, "--topic", "a"}} {
		code, _, stderr := captureAll(t, args...)
		if code != 2 || !strings.Contains(stderr, `mmmq.broker.storage.backend is "jetstream": verify and dump read the local segmented log only`) {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
	root, _ := fixture(t, 1)
	if code, out := capture(t, "verify", "--config", cfg, "--root", root); code != 0 {
		t.Fatalf("verify --root with backend jetstream: exit %d, output %q", code, out)
	}
}

func TestVerifyExitCodes(t *testing.T) {
	t.Run("healthy", func(t *testing.T) {
		root, _ := fixture(t, 3)
		code, out := capture(t, "verify", "--root", root)
		if code != 0 || !strings.Contains(out, "OK entries=3") {
			t.Fatalf("exit %d, output %q", code, out)
		}
		code, out = capture(t, "verify", "--root", root, "--json")
		var rep storage.TopicReport
		if code != 0 || json.Unmarshal([]byte(strings.TrimSpace(out)), &rep) != nil || rep.Status != storage.StatusOK {
			t.Fatalf("--json: exit %d, output %q", code, out)
		}
	})
	t.Run("torn tail is reported, cut only with --repair", func(t *testing.T) {
		root, seg := fixture(t, 3)
		before := size(t, seg)
		f, _ := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
		f.Write([]byte{0, 0, 0, 40, 1, 2}) // half an entry, never indexed
		f.Close()
		code, out := capture(t, "verify", "--root", root)
		if code != 0 || !strings.Contains(out, "TORN_TAIL would cut") {
			t.Fatalf("exit %d, output %q", code, out)
		}
		if got := size(t, seg); got != before+6 {
			t.Fatalf("verify without --repair changed the segment: %d bytes", got)
		}
		code, out = capture(t, "verify", "--root", root, "--repair")
		if code != 0 || !strings.Contains(out, "REPAIRED") || size(t, seg) != before {
			t.Fatalf("--repair: exit %d, output %q, size %d want %d", code, out, size(t, seg), before)
		}
	})
	t.Run("a lazy index tail is reported (exit 0), dumped, indexed again only with --repair", func(t *testing.T) {
		root, seg := fixture(t, 3)
		idx := strings.TrimSuffix(seg, storage.SegmentExt) + storage.IndexExt
		// What a power loss leaves of a lazily synced index: the segment
		// holds 3 entries, the index lists the first only.
		if err := os.Truncate(idx, storage.IndexEntrySize); err != nil {
			t.Fatal(err)
		}
		code, out := capture(t, "verify", "--root", root)
		if code != 0 || !strings.Contains(out, " INDEX_TAIL 2 valid entries after the offset index's last") ||
			!strings.Contains(out, "next-offset=3") {
			t.Fatalf("exit %d, output %q", code, out)
		}
		code, out = capture(t, "dump", "--root", root, "--topic", "t")
		if code != 0 || !strings.Contains(out, `{"i":2}`) {
			t.Fatalf("dump: exit %d, output %q", code, out)
		}
		if size(t, idx) != storage.IndexEntrySize {
			t.Fatal("verify or dump changed the index")
		}
		code, out = capture(t, "verify", "--root", root, "--repair")
		if code != 0 || !strings.Contains(out, "REPAIRED") || size(t, idx) != 3*storage.IndexEntrySize {
			t.Fatalf("--repair: exit %d, output %q, index %d bytes", code, out, size(t, idx))
		}
		if code, out = capture(t, "verify", "--root", root); code != 0 || !strings.Contains(out, "OK entries=3") {
			t.Fatalf("after --repair: exit %d, output %q", code, out)
		}
	})
	t.Run("an interrupted topic deletion is reported, removed only with --repair", func(t *testing.T) {
		root, _ := fixture(t, 3)
		left := filepath.Join(root, storage.DeletingPrefix+"0123456789abcdef")
		if err := os.MkdirAll(left, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(left, "0000000000000000000.mmm"), []byte("x"), 0o644)
		name := filepath.Base(left)
		code, out := capture(t, "verify", "--root", root)
		if code != 0 || !regexp.MustCompile(`(?m)^`+name+` +INTERRUPTED_DELETION `).MatchString(out) {
			t.Fatalf("exit %d, output %q", code, out)
		}
		// --json: stdout is JSON records only, the deletion one of them.
		code, out = capture(t, "verify", "--root", root, "--json")
		reps := decodeReports(t, out)
		if code != 0 || len(reps) != 2 || reps[0].Topic != name || reps[0].Status != storage.StatusInterruptedDeletion ||
			reps[0].Removed || reps[1].Topic != "t" || reps[1].Status != storage.StatusOK {
			t.Fatalf("--json: exit %d, records %+v", code, reps)
		}
		if _, err := os.Stat(left); err != nil {
			t.Fatalf("verify without --repair removed it: %v", err)
		}
		code, out = capture(t, "verify", "--root", root, "--repair", "--json")
		reps = decodeReports(t, out)
		if _, err := os.Stat(left); code != 0 || !os.IsNotExist(err) || len(reps) != 2 || !reps[0].Removed ||
			reps[0].Status != storage.StatusInterruptedDeletion {
			t.Fatalf("--repair --json: exit %d, records %+v, stat %v", code, reps, err)
		}
	})
	t.Run("bit flip is corruption: exit 3, files untouched", func(t *testing.T) {
		root, seg := fixture(t, 3)
		b, _ := os.ReadFile(seg)
		b[storage.HeaderSize+2] ^= 0x40 // inside the first entry's JSON
		os.WriteFile(seg, b, 0o644)
		code, out := capture(t, "verify", "--root", root)
		if code != 3 || !strings.Contains(out, "CORRUPT at "+seg+" byte 0 offset 0: crc mismatch") {
			t.Fatalf("exit %d, output %q", code, out)
		}
		if after, _ := os.ReadFile(seg); !bytes.Equal(after, b) {
			t.Fatal("verify modified a corrupt segment")
		}
		// --repair never touches corruption.
		if code, _ := capture(t, "verify", "--root", root, "--repair"); code != 3 {
			t.Fatalf("--repair on corruption: exit %d", code)
		}
		if after, _ := os.ReadFile(seg); !bytes.Equal(after, b) {
			t.Fatal("--repair modified a corrupt segment")
		}
	})
}

// A damaged incarnation file stops the broker, so verify reports it as
// corruption (exit 3) naming the file, with no offset (none applies).
func TestVerifyBadIncarnationIsCorrupt(t *testing.T) {
	for name, content := range map[string]string{"garbled": "zzzz\n", "empty": ""} {
		t.Run(name, func(t *testing.T) {
			root, _ := fixture(t, 3)
			inc := filepath.Join(root, "t", storage.IncarnationFile)
			if err := os.WriteFile(inc, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out := capture(t, "verify", "--root", root)
			if code != 3 || !strings.Contains(out, "CORRUPT at "+inc+" byte 0: incarnation file is not 32 hex digits") ||
				strings.Contains(out, "offset") {
				t.Fatalf("exit %d, output %q; want exit 3 and CORRUPT naming %s without an offset", code, out, inc)
			}
			code, out = capture(t, "verify", "--root", root, "--json")
			var rep storage.TopicReport
			if code != 3 || json.Unmarshal([]byte(strings.TrimSpace(out)), &rep) != nil || rep.Status != storage.StatusCorrupt {
				t.Fatalf("--json: exit %d, output %q", code, out)
			}
			if b, _ := os.ReadFile(inc); string(b) != content {
				t.Fatalf("verify changed the incarnation file: %q", b)
			}
		})
	}
}

// verify sorts out the data root as the broker's startup does: a
// directory under a topic name holding neither segment nor incarnation id
// but other files is CORRUPT (startup refuses it), an interrupted creation
// is reported and only --repair removes it, a directory that is not a
// topic name is SKIPPED; --repair leaves every foreign file alone.
func TestVerifyForeignAndUnfinishedDirectories(t *testing.T) {
	root, _ := fixture(t, 3)
	files := map[string]string{
		"backup/readme.txt":                              "important\n",
		"nested/deep/f":                                  "n\n",
		"used/checkpoints/foo.checkpoint":                "\x00\x00\x00\x00\x00\x00\x00\x07",
		"not a topic/f":                                  "f",
		".deleting-not-ours/keep":                        "k",
		"left.t/" + storage.IncarnationFile + vfs.TmpExt: "",
	}
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "empty.t"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out := capture(t, "verify", "--root", root)
	for _, want := range []string{
		"backup ", "CORRUPT at " + filepath.Join(root, "backup") + ": directory holds no segment and no incarnation id but holds readme.txt",
		"but holds deep/", "but holds checkpoints/",
		"not a topic", "SKIPPED not a topic name", ".deleting-not-ours", "left.t", "empty.t", "INTERRUPTED_CREATION",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("verify output lacks %q", want)
		}
	}
	if code != 3 {
		t.Errorf("exit %d, want 3 (startup would refuse backup, nested and used)", code)
	}
	if t.Failed() {
		t.Fatalf("output:\n%s", out)
	}
	code, out = capture(t, "verify", "--root", root, "--json")
	status := map[string]string{}
	for _, rep := range decodeReports(t, out) {
		status[rep.Topic] = rep.Status
	}
	want := map[string]string{
		"backup": storage.StatusCorrupt, "nested": storage.StatusCorrupt, "used": storage.StatusCorrupt,
		"left.t": storage.StatusInterruptedCreation, "empty.t": storage.StatusInterruptedCreation,
		"not a topic": "SKIPPED", ".deleting-not-ours": "SKIPPED", "t": storage.StatusOK,
	}
	if code != 3 || fmt.Sprint(status) != fmt.Sprint(want) {
		t.Fatalf("--json: exit %d, statuses %v, want %v", code, status, want)
	}
	code, out = capture(t, "verify", "--root", root, "--repair")
	if code != 3 || strings.Count(out, "INTERRUPTED_CREATION removed") != 2 {
		t.Fatalf("--repair: exit %d, output:\n%s", code, out)
	}
	for name, data := range files {
		b, err := os.ReadFile(filepath.Join(root, name))
		if strings.HasPrefix(name, "left.t/") {
			if !os.IsNotExist(err) {
				t.Errorf("%s: still there after --repair (%v)", name, err)
			}
			continue
		}
		if err != nil || string(b) != data {
			t.Errorf("%s after --repair: %q, %v; want it untouched", name, b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "empty.t")); !os.IsNotExist(err) {
		t.Errorf("empty.t after --repair: %v, want removed", err)
	}
}

func TestDump(t *testing.T) {
	root, seg := fixture(t, 3)
	code, out := capture(t, "dump", "--root", root, "--topic", "t", "--from", "1", "--count", "1")
	if code != 0 || !strings.Contains(out, "1\tpos=") || !strings.Contains(out, `CRC=OK	{"i":1}`) || strings.Contains(out, `{"i":2}`) {
		t.Fatalf("exit %d, output %q", code, out)
	}
	b, _ := os.ReadFile(seg)
	b[15+storage.HeaderSize+2] ^= 0x01 // inside the middle entry's JSON
	os.WriteFile(seg, b, 0o644)
	code, out = capture(t, "dump", "--root", root, "--topic", "t")
	if code != 3 || !strings.Contains(out, "1\tpos=15\tCRC=BAD") || !strings.Contains(out, `{"i":0}`) || !strings.Contains(out, `{"i":2}`) {
		t.Fatalf("exit %d, output %q", code, out)
	}
	if code, _ := capture(t, "dump", "--root", root, "--topic", "nope"); code != 1 {
		t.Fatalf("missing topic: exit %d, want 1", code)
	}
	if code, _ := capture(t, "dump", "--root", root, "--topic", "../x"); code != 2 {
		t.Fatalf("invalid topic: exit %d, want 2", code)
	}
}

func TestServeStartupFailureExits1(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(cfg, []byte("server:\n  prot: 1\n"), 0o644)
	code, _, stderr := captureAll(t, "serve", "--config", cfg)
	if code != 1 {
		t.Fatalf("unknown key: exit %d, want 1", code)
	}
	// One line naming the key, not Fx's event log.
	if lines := strings.Split(strings.TrimSpace(string(stderr)), "\n"); len(lines) != 1 ||
		!strings.Contains(lines[0], "server.prot") || !strings.HasPrefix(lines[0], "mmmq: startup failed:") {
		t.Fatalf("config error on stderr: %q", stderr)
	}
	if code, out := capture(t, "version"); code != 0 || !strings.HasPrefix(out, "mmmq ") {
		t.Fatalf("version: exit %d, %q", code, out)
	}
	if code, _ := capture(t, "nonsense"); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
}

// Every command prints its usage on stdout with exit 0 when asked with
// --help (or -h), and nothing on stderr.
func TestHelpGoesToStdout(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"},
		{"serve", "--help"}, {"verify", "--help"}, {"dump", "--help"}, {"bench", "--help"}, {"version", "--help"}, {"token", "--help"},
		{"serve", "-h"}, {"bench", "-h"},
		{"dispatchers", "--help"}, {"dispatchers", "help"}, {"dispatchers", "seek", "--help"}, {"dispatchers", "create", "-h"},
		{"topics", "--help"}, {"topics", "get", "--help"},
	} {
		code, out, stderr := captureAll(t, args...)
		if code != 0 || !strings.Contains(out, "usage") || len(stderr) != 0 {
			t.Errorf("mmmq %s: exit %d, stdout %q, stderr %q; want 0, the usage on stdout, nothing on stderr",
				strings.Join(args, " "), code, out, stderr)
		}
	}
}

// A bad flag or argument exits 2 with the error, the synopsis and how to
// get help: three lines on stderr, not the flag table (which buried the
// error), nothing on stdout; "version" takes no arguments (it printed the
// version and exited 0 for "version --bogus").
func TestUsageErrorsAreShort(t *testing.T) {
	for _, args := range [][]string{
		{"version", "--bogus"}, {"verify", "--bogus"}, {"dump", "--bogus"},
		{"topics", "list", "--bogus"}, {"dispatchers", "seek", "x", "--bogus"},
	} {
		code, out, stderr := captureAll(t, args...)
		stderr = strings.TrimSpace(stderr)
		lines := strings.Split(stderr, "\n")
		if code != 2 || out != "" || len(lines) > 3 || !strings.Contains(stderr, "bogus") {
			t.Errorf("mmmq %s: exit %d, stdout %q, stderr (%d lines) %q; want 2, nothing on stdout, at most 3 lines naming the bad argument",
				strings.Join(args, " "), code, out, len(lines), stderr)
		}
		if len(args) > 0 && args[0] != "version" && !strings.Contains(stderr, "--help' for the flags") {
			t.Errorf("mmmq %s: stderr %q does not say how to get help", strings.Join(args, " "), stderr)
		}
	}
}

// Flags after the data directory apply ("verify DIR --repair" repairs DIR),
// and an argument nobody reads is a usage error, never silently ignored: a
// verify that checked another directory would give false assurance.
func TestVerifyArgumentsAnywhere(t *testing.T) {
	root, seg := fixture(t, 3)
	f, _ := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte{0, 0, 0, 9, 1, 2}) // torn tail
	f.Close()
	before := size(t, seg)
	code, out := capture(t, "verify", root, "--json")
	var rep storage.TopicReport
	if code != 0 || json.Unmarshal([]byte(strings.TrimSpace(out)), &rep) != nil || rep.Status != storage.StatusTornTail {
		t.Fatalf("verify DIR --json: exit %d, output %q (want the torn tail of DIR reported as JSON)", code, out)
	}
	if code, _ := capture(t, "verify", root, "--repair"); code != 0 || size(t, seg) >= before {
		t.Fatalf("verify DIR --repair: exit %d, segment %d -> %d bytes (want the tail cut)", code, before, size(t, seg))
	}
	for _, args := range [][]string{
		{"verify", root, "extra"},
		{"verify", "--root", root, root},
		{"dump", "--root", root, "--topic", "t", "extra"},
	} {
		if code, _ := capture(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (unexpected argument)", args, code)
		}
	}
}

// verify and dump work on a topic whose start offset is not 0 (retention
// deleted its first segments): entries counts the entries on disk and
// next-offset is the high watermark. verify reports an interrupted
// retention deletion (a first segment with one file) as
// INTERRUPTED_RETENTION, something repair finishes, not corruption nor a
// torn tail; --repair finishes it.
func TestVerifyDumpAfterRetention(t *testing.T) {
	root := t.TempDir()
	l, err := storage.Open(filepath.Join(root, "t"), storage.Options{SegmentMaxBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if _, err := l.Append(context.Background(), []byte(fmt.Sprintf(`{"i":%d}`, i)), contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	res, err := l.ApplyRetention(contract.RetentionPolicy{MaxBytes: 1}, time.Now(), 20)
	if err != nil || res.StartOffset == 0 {
		t.Fatalf("retention: %+v %v", res, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	start := res.StartOffset
	// entries counts what is on disk; next-offset is the high watermark.
	code, out := capture(t, "verify", "--root", root)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("OK entries=%d start-offset=%d next-offset=40 ", 40-start, start)) {
		t.Fatalf("verify: exit %d, output %q", code, out)
	}
	code, out = capture(t, "verify", "--root", root, "--json")
	if reps := decodeReports(t, out); code != 0 || len(reps) != 1 || reps[0].Entries != 40-start ||
		reps[0].StartOffset != start || reps[0].NextOffset != 40 {
		t.Fatalf("verify --json: exit %d, %+v; want entries %d, start %d, next 40", code, reps, 40-start, start)
	}
	code, out = capture(t, "dump", "--root", root, "--topic", "t", "--from", "0", "--count", "2")
	if code != 0 || !strings.HasPrefix(out, fmt.Sprintf("%d\t", start)) || !strings.Contains(out, fmt.Sprintf(`{"i":%d}`, start+1)) {
		t.Fatalf("dump from 0: exit %d, output %q", code, out)
	}
	// An interrupted deletion of the segment at start: its .idx is gone.
	idx := filepath.Join(root, "t", storage.SegmentName(start)+storage.IndexExt)
	if err := os.Remove(idx); err != nil {
		t.Fatal(err)
	}
	code, out = capture(t, "verify", "--root", root)
	if code != 0 || !strings.Contains(out, " INTERRUPTED_RETENTION ") || strings.Contains(out, "TORN_TAIL") ||
		!strings.Contains(out, "finish interrupted retention deletion") {
		t.Fatalf("verify after an interrupted deletion: exit %d, output %q", code, out)
	}
	code, out = capture(t, "verify", "--root", root, "--json")
	if reps := decodeReports(t, out); code != 0 || len(reps) != 1 || reps[0].Status != storage.StatusInterruptedRetention {
		t.Fatalf("verify --json after an interrupted deletion: exit %d, %+v", code, reps)
	}
	code, out = capture(t, "verify", "--root", root, "--repair")
	if code != 0 || !strings.Contains(out, "REPAIRED") {
		t.Fatalf("--repair: exit %d, output %q", code, out)
	}
	if _, err := os.Stat(filepath.Join(root, "t", storage.SegmentName(start)+storage.SegmentExt)); !os.IsNotExist(err) {
		t.Fatalf("the lone .mmm is still there: %v", err)
	}
	code, out = capture(t, "verify", "--root", root)
	if code != 0 || !strings.Contains(out, "OK entries=") || !strings.Contains(out, " next-offset=40 ") {
		t.Fatalf("verify after repair: exit %d, output %q", code, out)
	}
}

// The help texts say everything verify does: the top-level usage lists
// --json, and --repair's text names every change it makes.
func TestVerifyHelpIsComplete(t *testing.T) {
	_, out := capture(t, "--help")
	if !strings.Contains(out, "mmmq verify [--root DIR] [--repair] [--json]") {
		t.Errorf("mmmq --help does not list verify's --json:\n%s", out)
	}
	_, out = capture(t, "verify", "--help")
	for _, want := range []string{"cut torn tails", "finish interrupted retention deletions", ".deleting- directories", "interrupted topic creations", "never touches corruption"} {
		if !strings.Contains(out, want) {
			t.Errorf("mmmq verify --help lacks %q:\n%s", want, out)
		}
	}
}

// TestVerifyAndDumpNameATornGroupCommit: after the 3 indexed entries, an
// unindexed entry with a zeroed sector in it and a valid entry after it
// (a group commit whose later page reached the disk, an earlier one not):
// verify reports it TORN_TAIL with the valid entry counted, dump shows the
// 3 entries and says on stderr what the next start cuts, and --repair cuts
// it.
func TestVerifyAndDumpNameATornGroupCommit(t *testing.T) {
	root, seg := fixture(t, 3)
	before := size(t, seg)
	big := storage.AppendEntry(nil, []byte(`{"p":"`+strings.Repeat("x", 1500)+`"}`))
	clear(big[600:1112])
	tail := storage.AppendEntry(big, []byte(`{"after":"the hole"}`))
	f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(tail)
	f.Close()
	code, out := capture(t, "verify", "--root", root)
	if code != 0 || !strings.Contains(out, "TORN_TAIL would cut") || !strings.Contains(out, "holding 1 CRC-valid entries after a hole") {
		t.Fatalf("verify: exit %d, output %q", code, out)
	}
	code, stdout, stderr := captureAll(t, "dump", "--root", root, "--topic", "t")
	if code != 0 || strings.Count(stdout, "CRC=OK") != 3 || !strings.Contains(stderr, fmt.Sprintf("the next start cuts %d segment bytes (holding 1 CRC-valid entries", len(tail))) {
		t.Fatalf("dump: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, out := capture(t, "verify", "--root", root, "--repair"); code != 0 || !strings.Contains(out, "REPAIRED") || size(t, seg) != before {
		t.Fatalf("--repair: exit %d, output %q, size %d want %d", code, out, size(t, seg), before)
	}
}
