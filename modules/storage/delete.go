package storage

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// DeletingPrefix starts the name of a topic directory that is being
// deleted: DeleteTopicDir renames <root>/<topic> to
// <root>/.deleting-<16 hex digits> before it removes anything. A name
// starting with '.' is never a valid topic name, so a crash in the middle
// leaves either the whole topic under its own name (the rename was not
// durable yet) or a directory that startup recognises and removes
// (FinishDeletions): never part of a topic under a topic's name.
const DeletingPrefix = ".deleting-"

// IsDeletingDir reports whether name (a data root entry) is a topic
// directory renamed aside by a deletion: DeletingPrefix and exactly the 16
// lower-case hex digits DeleteTopicDir gives it. Any other name starting
// with '.' is not a topic and not the broker's, and is left alone.
func IsDeletingDir(name string) bool {
	hexPart, ok := strings.CutPrefix(name, DeletingPrefix)
	if !ok || len(hexPart) != 16 {
		return false
	}
	for i := 0; i < len(hexPart); i++ {
		if c := hexPart[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// DeleteTopicDir removes the topic directory root/topic, whose log must be
// closed, so that a crash at any step leaves the whole topic or nothing:
//
//  1. rename root/topic to root/.deleting-<random>   (Hooks.AfterTopicRename)
//  2. fsync root: the topic is gone for good          (Hooks.AfterTopicRenameSync)
//  3. remove the renamed directory, file by file, depth first
//     (Hooks.AfterTopicFileRemove after each file)
//  4. fsync root
//
// A crash before 2 completes may leave the topic whole under its name; a
// crash after leaves a .deleting- directory that FinishDeletions removes at
// the next start. Errors: one wrapping fs.ErrNotExist when the topic
// directory does not exist, or the failing step's I/O error; an error in
// step 3 or 4 is returned with the topic already gone (aside is then the
// directory left for FinishDeletions).
func DeleteTopicDir(fsys vfs.FS, root, topic string, h *Hooks) (aside string, err error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	aside = filepath.Join(root, DeletingPrefix+hex.EncodeToString(b[:]))
	dir := filepath.Join(root, topic)
	if err := fsys.Rename(dir, aside); err != nil {
		return "", fmt.Errorf("delete topic %s: rename aside: %w", topic, err)
	}
	h.call(func(h *Hooks) func() { return h.AfterTopicRename })
	if err := fsys.SyncDir(root); err != nil {
		return aside, fmt.Errorf("delete topic %s: sync data root %s: %w", topic, root, err)
	}
	h.call(func(h *Hooks) func() { return h.AfterTopicRenameSync })
	if err := removeAll(fsys, aside, h); err != nil {
		return aside, fmt.Errorf("delete topic %s: %w", topic, err)
	}
	if err := fsys.SyncDir(root); err != nil {
		return aside, fmt.Errorf("delete topic %s: sync data root %s: %w", topic, root, err)
	}
	return aside, nil
}

// FinishDeletions removes every directory of root left by an interrupted
// topic deletion (named DeletingPrefix...) and fsyncs root when it removed
// any. It returns the removed names. Run it before the topics open.
func FinishDeletions(fsys vfs.FS, root string) (removed []string, err error) {
	ents, err := fsys.List(root)
	if vfs.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list data root %s: %w", root, err)
	}
	for _, e := range ents {
		if !e.IsDir || !IsDeletingDir(e.Name) {
			continue
		}
		if err := removeAll(fsys, filepath.Join(root, e.Name), nil); err != nil {
			return removed, fmt.Errorf("finish deletion of %s: %w", e.Name, err)
		}
		removed = append(removed, e.Name)
	}
	if len(removed) > 0 {
		if err := fsys.SyncDir(root); err != nil {
			return removed, fmt.Errorf("finish deletions: sync data root %s: %w", root, err)
		}
	}
	return removed, nil
}

// removeAll removes dir and everything under it through fsys, calling
// Hooks.AfterTopicFileRemove after each file.
func removeAll(fsys vfs.FS, dir string, h *Hooks) error {
	ents, err := fsys.List(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name)
		if e.IsDir {
			if err := removeAll(fsys, p, h); err != nil {
				return err
			}
			continue
		}
		if err := fsys.Remove(p); err != nil {
			return fmt.Errorf("remove %s: %w", p, err)
		}
		h.call(func(h *Hooks) func() { return h.AfterTopicFileRemove })
	}
	if err := fsys.Remove(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// call runs the hook pick selects, when h and it are non-nil.
func (h *Hooks) call(pick func(*Hooks) func()) {
	if h == nil {
		return
	}
	if fn := pick(h); fn != nil {
		fn()
	}
}
