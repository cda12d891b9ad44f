package schedule

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Statuses of a bucket file in a Report: the words `mmmq verify` uses for
// a topic.
const (
	// StatusOK: every record up to the end of the file passes its CRC.
	StatusOK = "OK"
	// StatusTornTail: damage within a crash's reach of the end; startup
	// cuts from the damage on (Tail says what that removes).
	StatusTornTail = "TORN_TAIL"
	// StatusCorrupt: damage with a valid record beyond a crash's reach
	// after it; startup refuses (a *CorruptionError), the broker does not
	// start.
	StatusCorrupt = "CORRUPT"
)

// FileReport is what Verify found in one bucket file.
type FileReport struct {
	File   string `json:"file"` // the bucket file's path
	Status string `json:"status"`
	Bytes  int64  `json:"bytes"` // the file's size
	// Records counts the valid records before the damage (every record
	// when OK): what startup keeps.
	Records int64 `json:"records"`
	// Pending counts the scheduled messages pending among them (what
	// startup counts; not counted for a CORRUPT file).
	Pending int64 `json:"pending"`
	// Cut is what startup cuts, for a TORN_TAIL file.
	Cut *Tail `json:"cut,omitempty"`
	// Corruption is what startup refuses, for a CORRUPT file.
	Corruption *CorruptionError `json:"corruption,omitempty"`
}

// Report is what Verify found in the store's directory.
type Report struct {
	Dir    string       `json:"dir"`
	Status string       `json:"status"` // the worst of the files': CORRUPT, TORN_TAIL or OK
	Files  []FileReport `json:"files"`  // every bucket file, by name
	// Drops are the topics whose deletion marker (<topic>.drop) is in the
	// directory: a topic deletion a crash interrupted, which startup
	// finishes (the topic and its scheduled messages deleted).
	Drops []string `json:"drops,omitempty"`
}

// Count returns how many files have status.
func (r Report) Count(status string) int {
	n := 0
	for _, f := range r.Files {
		if f.Status == status {
			n++
		}
	}
	return n
}

// Verify reads every bucket file of the store in dir as startup's
// recovery does (Open), with the same code, and changes nothing: each
// file's records and CRCs, what a cut of a torn tail would remove (and
// how many records passing their CRC lie in it) and what startup refuses
// as corruption. memoryBudget bounds its memory as the store's
// (Options.MemoryBudget; 0 for the default): a file holding more pending
// entries than one window is read several times, as at startup. A
// directory that does not exist is an empty store (nothing was ever
// scheduled). The error is for I/O failures only.
func Verify(fsys vfs.FS, dir string, memoryBudget int64) (Report, error) {
	rep := Report{Dir: dir, Status: StatusOK}
	s := New(Options{FS: fsys, Dir: dir, MemoryBudget: memoryBudget}, nil)
	ents, err := fsys.List(dir)
	switch {
	case vfs.IsNotExist(err):
		return rep, nil
	case err != nil:
		return rep, fmt.Errorf("schedule: list %s: %w", dir, err)
	}
	slices.SortFunc(ents, func(a, b vfs.DirEntry) int { return strings.Compare(a.Name, b.Name) })
	for _, e := range ents {
		if t, ok := strings.CutSuffix(e.Name, dropExt); ok && !e.IsDir {
			rep.Drops = append(rep.Drops, t)
			continue
		}
		if _, ok := parseBucketName(e.Name); e.IsDir || !ok {
			continue // startup passes over it too
		}
		fr, err := verifyFile(fsys, filepath.Join(dir, e.Name), s.windowMax())
		if err != nil {
			return rep, err
		}
		switch {
		case fr.Status == StatusCorrupt:
			rep.Status = StatusCorrupt
		case fr.Status == StatusTornTail && rep.Status == StatusOK:
			rep.Status = StatusTornTail
		}
		rep.Files = append(rep.Files, fr)
	}
	return rep, nil
}

// verifyFile is countPath without the cut: one bucket file read a window
// of at most windowMax pending entries at a time.
func verifyFile(fsys vfs.FS, name string, windowMax int) (FileReport, error) {
	rep := FileReport{File: name, Status: StatusOK}
	f, err := fsys.Open(name)
	if err != nil {
		return rep, fmt.Errorf("schedule: open %s: %w", name, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return rep, fmt.Errorf("schedule: size %s: %w", name, err)
	}
	rep.Bytes = size
	lo, end := first, size
	for pass := 0; ; pass++ {
		w, err := scanWindow(f, end, lo, windowMax, nil)
		if err != nil {
			return rep, fmt.Errorf("schedule: scan %s: %w", name, err)
		}
		if pass == 0 {
			rep.Records = w.records
			if w.end < size {
				at, err := validAfterDamage(f, w.end, size)
				if err != nil {
					return rep, fmt.Errorf("schedule: scan %s: %w", name, err)
				}
				if at >= 0 {
					rep.Status, rep.Corruption = StatusCorrupt, &CorruptionError{File: name, Pos: w.end, ValidAt: at}
					return rep, nil
				}
				t, err := inspectTail(f, w.end, size)
				if err != nil {
					return rep, fmt.Errorf("schedule: scan %s: %w", name, err)
				}
				rep.Status, rep.Cut = StatusTornTail, &t
			}
			end = w.end
		}
		rep.Pending += int64(len(w.pending))
		if !w.more {
			return rep, nil
		}
		lo = w.bound
	}
}
