package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/schedule"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// rootDir resolves --root, falling back to the configured root-dir; with a
// backend other than local there is no data directory to fall back to,
// and it says so.
func rootDir(root, cfgPath string) (string, config.Config, error) {
	cfg, err := config.Load(loadOptions(cfgPath))
	if err != nil {
		return "", config.Config{}, err
	}
	if root == "" {
		st := config.SectionValue(cfg, topicqueue.StorageSection)
		if b := st.Backend; b != "" && b != topicqueue.BackendLocal {
			return "", config.Config{}, fmt.Errorf("mmmq.broker.storage.backend is %q: verify and dump read the local segmented log only "+
				"(the %s servers check their own streams); give --root DIR to read a local data directory", b, b)
		}
		root = st.RootDir
	}
	return root, *cfg, nil
}

func storageOptions(cfg config.Config) storage.Options {
	return topicqueue.StorageOptionsFromConfig(config.SectionValue(&cfg, topicqueue.SegmentSection))
}

func verify(args []string) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	root := fs.String("root", "", "data root (default mmmq.broker.storage.root-dir)")
	cfgPath := fs.String("config", "", "YAML config file")
	repair := fs.Bool("repair", false, "do what the broker's next start would: index again the valid entries the last segment's index lacks,\n"+
		"cut torn tails, finish interrupted retention deletions,\n"+
		"remove the .deleting- directories of interrupted topic deletions and the directories of interrupted topic creations\n"+
		"(never touches corruption nor the scheduled messages in .scheduled, which the broker's start cuts and logs;\n"+
		"refused while a broker holds the data directory)")
	asJSON := fs.Bool("json", false, "print one JSON report per line (every topic and directory), nothing else on stdout")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: "+prog+" verify [--root DIR | DIR] [--config FILE] [--repair] [--json]")
		fs.PrintDefaults()
	}
	pos, code, ok := ParseArgs(fs, args, os.Stdout, os.Stderr)
	if !ok {
		return code
	}
	switch {
	case len(pos) > 1 || (len(pos) == 1 && *root != ""):
		fmt.Fprintf(os.Stderr, prog+" verify: unexpected argument %q (give the data directory once, as DIR or --root DIR)\n", pos[len(pos)-1])
		fs.Usage()
		return 2
	case len(pos) == 1: // `mmmq verify <root-dir>`: the data directory as the one argument
		*root = pos[0]
	}
	dir, cfg, err := rootDir(*root, *cfgPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, prog+" verify:", err)
		return 2
	}
	ents, err := listRoot(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, prog+" verify:", err)
		return 1
	}
	if *repair {
		// Repair writes: never under a running broker.
		release, err := topicqueue.LockRootFS(vfs.OS{}, dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, prog+" verify --repair:", err)
			return 1
		}
		defer release()
	}
	v := &verifier{root: dir, opts: storageOptions(cfg), repair: *repair, asJSON: *asJSON, out: os.Stdout,
		schedBudget: config.SectionValue(&cfg, schedule.ConfigSection).MemoryBudget}
	if err := v.deletions(ents.deleting); err != nil {
		fmt.Fprintln(os.Stderr, prog+" verify --repair:", err)
		return 1
	}
	v.skipped(ents.skipped)
	if ents.scheduled {
		if err := v.scheduled(); err != nil {
			fmt.Fprintf(os.Stderr, prog+" verify: %s: %v\n", contract.ScheduledDir, err)
			return 1
		}
	}
	return v.topics(ents.topics, ents.total)
}

// verifier is one run of `mmmq verify` over the data root.
type verifier struct {
	root   string
	opts   storage.Options
	repair bool
	asJSON bool
	out    io.Writer
	// schedBudget is mmmq.broker.schedule.memory-budget: the scheduled
	// store is read within it, as at startup.
	schedBudget int64
	// sched is what the scheduled store's check found (nil: no
	// .scheduled directory).
	sched *schedule.Report
}

// topics verifies every topic directory (and repairs with --repair) and
// returns the exit code: 3 when one is corrupt, 1 on an I/O error.
func (v *verifier) topics(topics []string, total int64) int {
	bar := newProgress(os.Stderr, total)
	corrupt, cpProblems := 0, 0
	for _, t := range topics {
		rep, err := storage.Verify(filepath.Join(v.root, t), v.opts, bar.add)
		bar.clear()
		if err == nil && v.repair {
			err = v.repairTopic(&rep)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, prog+" verify: %s: %v\n", t, err)
			return 1
		}
		if rep.Status == storage.StatusCorrupt {
			corrupt++
		}
		if len(rep.Checkpoints) > 0 {
			cpProblems++
		}
		printReport(v.out, rep, v.asJSON)
	}
	bar.done()
	// Checkpoint problems (a garbled checkpoint, a damaged finished-offsets
	// file) do not stop a topic: the broker redelivers, never skips. They
	// are counted, not an exit status.
	cps := ""
	if cpProblems > 0 {
		cps = fmt.Sprintf(", %d with checkpoint problems (listed above; the broker starts and redelivers what they held)", cpProblems)
	}
	sched := ""
	schedCorrupt := 0
	if v.sched != nil {
		schedCorrupt = v.sched.Count(schedule.StatusCorrupt)
		sched = fmt.Sprintf("; scheduled messages (%s): %d bucket files, %d with a torn tail, %d corrupt",
			contract.ScheduledDir, len(v.sched.Files), v.sched.Count(schedule.StatusTornTail), schedCorrupt)
	}
	fmt.Fprintf(os.Stderr, "verified %d topics: %d corrupt%s%s\n", len(topics), corrupt, cps, sched)
	if corrupt > 0 || schedCorrupt > 0 {
		return 3
	}
	return 0
}

// repairTopic does what the broker's startup would do to a topic verify
// found repairable: index again a last segment's unindexed entries, cut a
// torn tail or finish an interrupted retention
// deletion (an Open), or remove what an interrupted creation left.
func (v *verifier) repairTopic(rep *storage.TopicReport) error {
	dir := filepath.Join(v.root, rep.Topic)
	switch rep.Status {
	case storage.StatusTornTail, storage.StatusInterruptedRetention, storage.StatusIndexTail, storage.StatusZeroTail:
		l, err := storage.Open(dir, v.opts)
		if err == nil {
			err = l.Close()
		}
		if err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		rep.Status = "REPAIRED"
	case storage.StatusInterruptedCreation:
		removed, err := storage.RemoveUnfinishedTopic(vfs.OS{}, dir)
		if err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		rep.Removed = removed
	}
	return nil
}

// rootEntries are the directories of a data root, sorted out as the
// broker's startup does.
type rootEntries struct {
	topics   []string // valid topic names
	deleting []string // directories of interrupted topic deletions
	skipped  []string // other directories: not topics, left alone by the broker
	// scheduled: the scheduled messages' directory (contract.ScheduledDir)
	// is there; the broker's scheduler recovers it at startup.
	scheduled bool
	total     int64 // the topics' segment bytes, for the progress indicator
}

// listRoot lists the directories under dir; plain files (the lock file)
// are not reported.
func listRoot(dir string) (rootEntries, error) {
	var r rootEntries
	ents, err := vfs.OS{}.List(dir)
	if err != nil {
		return r, err
	}
	for _, e := range ents {
		switch {
		case !e.IsDir:
		case e.Name == contract.ScheduledDir:
			r.scheduled = true
		case contract.ValidateTopic(e.Name) == nil:
			r.topics = append(r.topics, e.Name)
			r.total += dirBytes(filepath.Join(dir, e.Name))
		case storage.IsDeletingDir(e.Name):
			r.deleting = append(r.deleting, e.Name)
		default:
			r.skipped = append(r.skipped, e.Name)
		}
	}
	return r, nil
}

// skipped reports the directories that are not topics; the broker skips
// them too (with a warning) and never touches them.
func (v *verifier) skipped(names []string) {
	for _, n := range names {
		printReport(v.out, storage.TopicReport{Topic: n, Status: statusSkipped,
			Detail: "not a topic name; the broker leaves it alone (" + contract.ValidateTopic(n).Error() + ")"}, v.asJSON)
	}
}

// deletions reports each directory a topic deletion interrupted by a
// crash left (the broker removes them when it starts), and removes them
// with --repair.
func (v *verifier) deletions(deleting []string) error {
	if len(deleting) == 0 {
		return nil
	}
	if v.repair {
		if _, err := storage.FinishDeletions(vfs.OS{}, v.root); err != nil {
			return err
		}
	}
	for _, d := range deleting {
		printReport(v.out, storage.TopicReport{Topic: d, Status: storage.StatusInterruptedDeletion, Removed: v.repair}, v.asJSON)
	}
	return nil
}

// statusSkipped is the status of a directory that is not a topic.
const statusSkipped = "SKIPPED"

func printReport(w io.Writer, rep storage.TopicReport, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(rep)
		fmt.Fprintln(w, string(b))
		return
	}
	fmt.Fprintf(w, "%-40s %s %s\n", rep.Topic, rep.Status, describe(rep))
	for _, p := range rep.Checkpoints {
		fmt.Fprintf(w, "%-40s   checkpoint: %s\n", "", p)
	}
}

// describe is the text after the status on a report's line.
func describe(rep storage.TopicReport) string {
	counts := fmt.Sprintf("entries=%d start-offset=%d next-offset=%d bytes=%d", rep.Entries, rep.StartOffset, rep.NextOffset, rep.Bytes)
	switch rep.Status {
	case statusSkipped:
		return rep.Detail
	case storage.StatusInterruptedDeletion, storage.StatusInterruptedCreation:
		switch {
		case rep.Removed:
			return "removed"
		case rep.Status == storage.StatusInterruptedDeletion:
			return "a deleted topic's files; the broker removes them at its next start (or " + prog + " verify --repair)"
		}
		return "what a topic creation interrupted before its incarnation id left (nothing was acknowledged in it); the broker removes it at its next start (or " + prog + " verify --repair)"
	case storage.StatusCorrupt:
		return fmt.Sprintf("at %s: %s", corruptAt(rep.Corruption), rep.Corruption.Reason)
	case storage.StatusTornTail:
		torn := ""
		if n := rep.Recovery.CutValidEntries; n > 0 {
			torn = fmt.Sprintf(" (holding %d CRC-valid entries after a hole: a torn group commit)", n)
		}
		zeros := ""
		if n := rep.Recovery.ZeroTailBytes; n > 0 {
			zeros = fmt.Sprintf(" (and %d bytes of zeros after the last entry: a preallocated tail)", n)
		}
		return fmt.Sprintf("would cut %d index bytes and %d segment bytes%s%s, and index again %d entries: %s; then %s",
			rep.Recovery.CutIndexBytes, rep.Recovery.TruncatedBytes, torn, zeros, rep.Recovery.ReindexedEntries, strings.Join(rep.Recovery.Actions, "; "), counts)
	case storage.StatusZeroTail:
		return fmt.Sprintf("the active segment's files end in %d bytes of zeros after the last entry (preallocated by a broker that did not close cleanly); the broker cuts them at its next start (or "+prog+" verify --repair), no entry is involved; %s",
			rep.Recovery.ZeroTailBytes, counts)
	case storage.StatusIndexTail:
		return fmt.Sprintf("%d valid entries after the offset index's last; the broker indexes them again at its next start (or "+prog+" verify --repair), nothing is cut; %s",
			rep.Recovery.ReindexedEntries, counts)
	case storage.StatusInterruptedRetention:
		return fmt.Sprintf("a crash interrupted a retention deletion; the broker finishes it at its next start (or "+prog+" verify --repair): %s; %s",
			strings.Join(rep.Recovery.Actions, "; "), counts)
	}
	return counts
}

// corruptAt is where c is, for the CORRUPT line: the file, then "byte N"
// and "offset N" when they apply (a whole-file problem has neither).
func corruptAt(c *contract.CorruptionError) string {
	s := c.File
	if c.Pos >= 0 {
		s += fmt.Sprintf(" byte %d", c.Pos)
	}
	if c.Offset >= 0 {
		s += fmt.Sprintf(" offset %d", c.Offset)
	}
	return s
}

func dirBytes(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), storage.SegmentExt) {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

// progress draws a one-line progress bar on a terminal for scans over 64 MiB.
type progress struct {
	w       *os.File
	total   int64
	done_   int64
	last    time.Time
	enabled bool
}

func newProgress(w *os.File, total int64) *progress {
	fi, err := w.Stat()
	tty := err == nil && fi.Mode()&os.ModeCharDevice != 0
	return &progress{w: w, total: total, enabled: tty && total > 64<<20}
}

func (p *progress) add(n int64) {
	p.done_ += n
	if !p.enabled || time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	pct := float64(p.done_) * 100 / float64(p.total)
	fmt.Fprintf(p.w, "\r[%-40s] %5.1f%% %d/%d MiB", strings.Repeat("#", int(pct*40/100)), pct, p.done_>>20, p.total>>20)
}

func (p *progress) clear() {
	if p.enabled {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func (p *progress) done() { p.clear() }

// scheduled checks the scheduled messages' store (contract.ScheduledDir)
// with the scheduler's own recovery code, read-only, and prints one line
// for the directory, then one per damaged bucket file. --repair leaves it
// as it is: the broker's start cuts a torn tail and logs what it drops,
// and a file left untouched can still be copied out first.
func (v *verifier) scheduled() error {
	dir := filepath.Join(v.root, contract.ScheduledDir)
	rep, err := schedule.Verify(vfs.OS{}, dir, v.schedBudget)
	if err != nil {
		return err
	}
	v.sched = &rep
	sum := schedReport{Topic: contract.ScheduledDir, Status: rep.Status, Files: len(rep.Files),
		TornTails: rep.Count(schedule.StatusTornTail), Corrupt: rep.Count(schedule.StatusCorrupt), Drops: rep.Drops}
	for _, f := range rep.Files {
		sum.Bytes += f.Bytes
		sum.Records += f.Records
		sum.Pending += f.Pending
	}
	sum.Detail = describeSched(sum)
	v.printSched(sum)
	for _, f := range rep.Files {
		if f.Status == schedule.StatusOK {
			continue
		}
		line := schedReport{Topic: filepath.Join(contract.ScheduledDir, filepath.Base(f.File)), Status: f.Status,
			Bytes: f.Bytes, Records: f.Records, Pending: f.Pending, Cut: f.Cut, Corruption: f.Corruption}
		line.Detail = describeSchedFile(f, v.repair)
		v.printSched(line)
	}
	return nil
}

// schedReport is a line of the scheduled store's report: the directory's
// (Files, TornTails, Corrupt, Drops) or a damaged bucket file's (Cut,
// Corruption). Its names are those of a topic's line where they mean the
// same (topic, status, bytes, detail).
type schedReport struct {
	Topic      string                    `json:"topic"` // ".scheduled" or ".scheduled/<bucket file>"
	Status     string                    `json:"status"`
	Bytes      int64                     `json:"bytes"`
	Records    int64                     `json:"records"` // valid records (what startup keeps)
	Pending    int64                     `json:"pending"` // pending scheduled messages among them
	Files      int                       `json:"bucketFiles,omitempty"`
	TornTails  int                       `json:"tornTails,omitempty"`
	Corrupt    int                       `json:"corrupt,omitempty"`
	Drops      []string                  `json:"interruptedDeletions,omitempty"`
	Cut        *schedule.Tail            `json:"cut,omitempty"`
	Corruption *schedule.CorruptionError `json:"corruption,omitempty"`
	Detail     string                    `json:"detail,omitempty"`
}

func (v *verifier) printSched(r schedReport) {
	if v.asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintln(v.out, string(b))
		return
	}
	fmt.Fprintf(v.out, "%-40s %s %s\n", r.Topic, r.Status, r.Detail)
}

// describeSched is the text after the status on the scheduled store's
// line.
func describeSched(r schedReport) string {
	s := fmt.Sprintf("scheduled messages: bucket-files=%d records=%d pending=%d bytes=%d", r.Files, r.Records, r.Pending, r.Bytes)
	if r.TornTails+r.Corrupt > 0 {
		s += fmt.Sprintf(" (%d with a torn tail, %d corrupt: listed below; records and pending count what comes before the damage)", r.TornTails, r.Corrupt)
	}
	if len(r.Drops) > 0 {
		s += fmt.Sprintf("; interrupted topic deletions the broker finishes at its next start, deleting the topic and its scheduled messages: %s",
			strings.Join(r.Drops, ", "))
	}
	return s
}

// describeSchedFile is the text after the status on a damaged bucket
// file's line.
func describeSchedFile(f schedule.FileReport, repair bool) string {
	left := ""
	if repair {
		left = "; --repair leaves it to the broker's start"
	}
	switch {
	case f.Corruption != nil:
		return fmt.Sprintf("at %s byte %d: damaged record with a valid record at byte %d after it, beyond what a crash can tear (fsynced data damaged); "+
			"the broker refuses to start: move the file out of %s to start without its pending messages%s; records=%d before the damage, bytes=%d",
			f.File, f.Corruption.Pos, f.Corruption.ValidAt, contract.ScheduledDir, left, f.Records, f.Bytes)
	case f.Cut != nil:
		c := f.Cut
		lost := "no record after the damage passes its CRC (what a crash leaves)"
		if c.Valid > 0 {
			lost = fmt.Sprintf("%d records after the damage pass their CRC, %d of them pending scheduled messages: the cut drops them "+
				"(acknowledged messages unless a crash tore the damage; copy the file out first to keep them)", c.Valid, c.Pending)
		}
		return fmt.Sprintf("the broker's start cuts %d bytes at byte %d, %d records (%d damaged): %s%s; it keeps records=%d pending=%d of bytes=%d",
			c.Bytes, c.At, c.Records, c.Damaged, lost, left, f.Records, f.Pending, f.Bytes)
	}
	return fmt.Sprintf("records=%d pending=%d bytes=%d", f.Records, f.Pending, f.Bytes)
}
