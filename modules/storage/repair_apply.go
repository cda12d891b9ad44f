package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Apply: the last step of repair. It carries out the plans of a topic that
// no segment refused: every change is fsynced (files by truncSync, the
// directory once at the end when an entry was created or removed). Plan
// closed every file; apply opens only the ones it changes, one at a time.

// applyPlans applies plans in dir and removes the leftover tmps. It returns
// the kept segments, their files closed. Errors name the step and the file
// ("truncate index <path>: ...", "sync topic dir <dir>: ...").
//
// The kept last segment's two files are fsynced whatever the plan says,
// the .mmm before any index entry is written: a process that was killed
// leaves its writes in the page cache, where repair reads them as if they
// were on disk. Without this, an entry indexed again from bytes that were
// never fsynced would be served (and a retry of it answered as a DURABLE
// duplicate), and a power loss after the restart could leave an index
// pointing past its segment; and a lazily written index found complete in
// the page cache would be taken as synced. The two fsyncs cost 0.2–0.5 ms
// per topic on a virtual disk even when nothing is dirty (each one flushes
// the device's cache), so a broker opening many topics syncs the whole
// filesystem once instead and sets Options.FilesystemSynced: syncLast is
// then false.
func applyPlans(fsys vfs.FS, dir string, plans []*segPlan, tmps []string, rep *RepairReport, syncLast bool) ([]*segment, error) {
	segs := make([]*segment, 0, len(plans))
	dirDirty := false
	last := -1
	for i, p := range plans {
		if syncLast && !p.removeIdx && !p.finishDelete {
			last = i
		}
	}
	for i, p := range plans {
		if i == last && p.hasMMM {
			if err := syncFile(fsys, p.mmmPath); err != nil {
				return nil, fmt.Errorf("sync segment %s: %w", p.mmmPath, err)
			}
		}
		changed, err := applySegment(fsys, p, rep)
		if err != nil {
			return nil, err
		}
		if i == last {
			if err := syncFile(fsys, p.idxPath); err != nil {
				return nil, fmt.Errorf("sync index %s: %w", p.idxPath, err)
			}
		}
		dirDirty = dirDirty || changed
		if !p.removeIdx && !p.finishDelete {
			s := p.segment()
			s.tail = nil // in the index now
			segs = append(segs, s)
		}
	}
	for _, t := range tmps {
		if err := fsys.Remove(filepath.Join(dir, t)); err != nil && !vfs.IsNotExist(err) {
			return nil, fmt.Errorf("remove %s: %w", t, err)
		}
		dirDirty = true
	}
	if dirDirty {
		if err := fsys.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("sync topic dir %s: %w", dir, err)
		}
	}
	return segs, nil
}

// applySegment carries out one segment's plan: remove a lone empty index,
// create a missing one, cut the index to the entries kept, append the
// positions of the entries indexed again, and cut the segment to end bytes
// — in that order, each step fsynced, so that a crash in between leaves
// what repair plans the same way again. It reports whether a directory
// entry was created or removed.
func applySegment(fsys vfs.FS, p *segPlan, rep *RepairReport) (dirChanged bool, err error) {
	switch {
	case p.finishDelete:
		lone := p.mmmPath
		if p.hasIdx {
			lone = p.idxPath
		}
		if err := fsys.Remove(lone); err != nil && !vfs.IsNotExist(err) {
			return false, fmt.Errorf("remove %s: %w", lone, err)
		}
		rep.Removed = append(rep.Removed, filepath.Base(lone))
		return true, nil
	case p.removeIdx:
		if err := fsys.Remove(p.idxPath); err != nil {
			return false, fmt.Errorf("remove %s: %w", p.idxPath, err)
		}
		rep.Removed = append(rep.Removed, filepath.Base(p.idxPath))
		return true, nil
	case p.createIdx:
		f, err := fsys.Create(p.idxPath)
		if err != nil {
			return false, fmt.Errorf("create index %s: %w", p.idxPath, err)
		}
		if err := f.Close(); err != nil {
			return false, fmt.Errorf("create index %s: %w", p.idxPath, err)
		}
		dirChanged = true
	}
	keep := p.indexKept()
	if p.idxSize > keep*IndexEntrySize {
		if err := truncFile(fsys, p.idxPath, keep*IndexEntrySize); err != nil {
			return dirChanged, fmt.Errorf("truncate index %s: %w", p.idxPath, err)
		}
	}
	if len(p.tail) > 0 {
		if err := appendIndex(fsys, p.idxPath, keep, p.tail); err != nil {
			return dirChanged, fmt.Errorf("index again %s: %w", p.idxPath, err)
		}
	}
	if p.mmmSize > p.end {
		if err := truncFile(fsys, p.mmmPath, p.end); err != nil {
			return dirChanged, fmt.Errorf("truncate segment %s: %w", p.mmmPath, err)
		}
	}
	return dirChanged, nil
}

// keptSegments is the check-only outcome: the segments as apply would keep
// them, without creating or removing anything.
func keptSegments(plans []*segPlan) []*segment {
	var segs []*segment
	for _, p := range plans {
		if !p.removeIdx && !p.finishDelete {
			segs = append(segs, p.segment())
		}
	}
	return segs
}

// appendIndex writes the positions pos as index entries from entry at on
// into the index file at path, and fsyncs it.
func appendIndex(fsys vfs.FS, path string, at int64, pos []int64) error {
	f, err := fsys.OpenRW(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 0, len(pos)*IndexEntrySize)
	for _, p := range pos {
		buf = binary.BigEndian.AppendUint64(buf, uint64(p))
	}
	_, err = f.WriteAt(buf, at*IndexEntrySize)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// syncFile opens the file at path read-write and fsyncs it.
func syncFile(fsys vfs.FS, path string) error {
	f, err := fsys.OpenRW(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// truncFile opens the file at path read-write, truncates it to size bytes,
// fsyncs and closes it.
func truncFile(fsys vfs.FS, path string, size int64) error {
	f, err := fsys.OpenRW(path)
	if err != nil {
		return err
	}
	err = truncSync(f, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// truncSync truncates f to size bytes and fsyncs it.
func truncSync(f vfs.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}
