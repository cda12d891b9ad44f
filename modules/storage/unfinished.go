package storage

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/mmmq/mmmq/modules/contract"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// A topic's creation (Open of a directory that holds no topic yet) makes,
// in this order: the directory (MkdirDurable), incarnation.tmp, renamed to
// incarnation (WriteIncarnation), then the first segment's .mmm and .idx
// (createSegment). Until the incarnation file or a segment file exists, a
// crash or a failed write (a full disk) can only have left the directory,
// empty or holding incarnation.tmp: nothing was acknowledged in it. Such
// a directory is an unfinished creation, removed at startup. A directory
// under a topic's name that holds neither the incarnation file nor a
// segment file but holds anything else (a checkpoint, a file or directory
// of someone else's) was not left by a creation: the broker refuses it
// like corruption and never removes or writes into it.

// ErrUnfinishedTopic is returned by OpenExisting for a topic directory that
// holds nothing but what an interrupted creation leaves (see above).
// OpenExisting has removed it.
var ErrUnfinishedTopic = errors.New("storage: unfinished topic creation removed")

// topicDir is what a topic directory holds, sorted out for deciding
// whether it is a topic, an unfinished creation, or something else.
type topicDir struct {
	missing bool     // the directory does not exist
	topic   bool     // it holds the incarnation file or a segment file
	foreign []string // entries a creation never makes; a directory ends in "/"
}

// unfinished reports whether the directory exists and holds only what an
// interrupted creation leaves.
func (d topicDir) unfinished() bool { return !d.missing && !d.topic && len(d.foreign) == 0 }

// refused reports whether the directory is neither a topic nor an
// unfinished creation.
func (d topicDir) refused() bool { return !d.topic && len(d.foreign) > 0 }

// inspectTopicDir lists dir and sorts its entries out. Errors are List's,
// other than a missing directory.
func inspectTopicDir(fsys vfs.FS, dir string) (topicDir, error) {
	ents, err := fsys.List(dir)
	if vfs.IsNotExist(err) {
		return topicDir{missing: true}, nil
	}
	if err != nil {
		return topicDir{}, fmt.Errorf("list topic dir %s: %w", dir, err)
	}
	var d topicDir
	for _, e := range ents {
		switch {
		case e.IsDir:
			d.foreign = append(d.foreign, e.Name+"/")
		case e.Name == IncarnationFile:
			d.topic = true
		case e.Name == IncarnationFile+vfs.TmpExt:
		default:
			if _, ok := parseSegmentName(e.Name, SegmentExt); ok {
				d.topic = true
			} else if _, ok := parseSegmentName(e.Name, IndexExt); ok {
				d.topic = true
			} else {
				d.foreign = append(d.foreign, e.Name)
			}
		}
	}
	return d, nil
}

// notATopicError is the refusal of a directory under a topic's name that
// holds neither the incarnation file nor a segment, but holds entries a
// topic creation never makes. Pos and Offset are -1: no byte or message
// is concerned.
func notATopicError(dir string, d topicDir) *contract.CorruptionError {
	shown := d.foreign
	more := ""
	if len(shown) > 5 {
		shown, more = shown[:5], fmt.Sprintf(" and %d more", len(d.foreign)-5)
	}
	return &contract.CorruptionError{Topic: filepath.Base(dir), File: dir, Pos: -1, Offset: -1,
		Reason: fmt.Sprintf("directory holds no segment and no incarnation id but holds %s%s, which no topic creation leaves "+
			"(a topic whose log was lost, or a directory that is not the broker's); files left untouched (move it out of the data root)",
			strings.Join(shown, ", "), more)}
}

// removeCreation removes what a topic creation makes in dir — the first
// segment's files, incarnation.tmp and incarnation — then dir itself
// when that leaves it empty, and syncs its parent. Anything else in dir
// stays, and so does dir (the error then says why). Callers at startup
// and after a failed creation ignore the error: a later start removes
// what is left of an unfinished creation.
func removeCreation(fsys vfs.FS, dir string) error {
	mmm, idx := segmentPaths(dir, 0)
	for _, p := range []string{mmm, idx, filepath.Join(dir, IncarnationFile+vfs.TmpExt), filepath.Join(dir, IncarnationFile)} {
		if err := fsys.Remove(p); err != nil && !vfs.IsNotExist(err) {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}
	if err := fsys.Remove(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if err := fsys.SyncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("sync %s: %w", filepath.Dir(dir), err)
	}
	return nil
}

// RemoveUnfinishedTopic removes dir when it holds only what an interrupted
// creation leaves (what the broker does at startup; `mmmq verify
// --repair`). It reports whether it removed it; a directory holding
// anything else is left alone.
func RemoveUnfinishedTopic(fsys vfs.FS, dir string) (bool, error) {
	d, err := inspectTopicDir(fsys, dir)
	if err != nil || !d.unfinished() {
		return false, err
	}
	if err := removeCreation(fsys, dir); err != nil {
		return false, err
	}
	return true, nil
}

// OpenExisting is Open for a topic found on disk at startup: a directory
// an interrupted or failed creation left (empty, or holding only
// incarnation.tmp) is removed instead of created again — startup must not
// need free space, nor invent an empty topic nobody published to — and
// ErrUnfinishedTopic is returned; so it is for a directory gone since it
// was listed. Anything else is Open, which refuses a directory holding
// neither the incarnation file nor a segment but other entries.
func OpenExisting(dir string, opts Options) (*Log, error) {
	o := opts.withDefaults()
	d, err := inspectTopicDir(o.FS, dir)
	if err != nil {
		return nil, err
	}
	if d.missing || d.unfinished() {
		if !d.missing {
			_ = removeCreation(o.FS, dir)
		}
		return nil, fmt.Errorf("%w: %s", ErrUnfinishedTopic, dir)
	}
	return Open(dir, opts)
}
