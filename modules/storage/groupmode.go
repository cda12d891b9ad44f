package storage

import (
	"fmt"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Group mode file layout (on-disk format, do not change):
//
//	checkpoints/<name>.mode: exactly "shared\n" (7 bytes) or
//	                         "exclusive\n" (10 bytes)
//
// A consumer group's mode (contract.GroupModer), fixed by its first use.
// It is replaced whole (tmp, fsync, rename, directory fsync), so a power
// loss leaves the old content or the new one. Anything else in the file is
// an error naming it: a mode is never guessed. A checkpoint without the
// file is exclusive when its <name>.checkpoint exists (a group stored
// before modes existed, or a dispatcher's), and of a group never used when
// not.
const (
	// ModeExt is the file extension of a consumer group's mode:
	// <topic>/checkpoints/<name>.mode, beside <name>.checkpoint.
	ModeExt = ".mode"
)

var _ contract.GroupModer = (*Checkpoint)(nil)

// modePath is <topic>/checkpoints/<name>.mode.
func (c *Checkpoint) modePath() string {
	return c.path[:len(c.path)-len(CheckpointExt)] + ModeExt
}

// GroupMode returns the stored mode, contract.GroupExclusive or
// contract.GroupShared; contract.GroupExclusive when <name>.mode does not
// exist but <name>.checkpoint does; "" when neither exists (a group never
// used). Errors: a mode file that cannot be read, or whose content is not
// exactly "shared\n" or "exclusive\n" (the error names the file); one
// wrapping contract.ErrClosed after Close.
func (c *Checkpoint) GroupMode() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", fmt.Errorf("group mode %s: %w", c.name, contract.ErrClosed)
	}
	mode, err := c.storedMode()
	if err != nil || mode != "" {
		return mode, err
	}
	if c.exists {
		return contract.GroupExclusive, nil
	}
	return "", nil
}

// SetGroupMode durably stores mode (contract.GroupExclusive or
// contract.GroupShared) in <name>.mode: it writes <name>.mode.tmp, fsyncs
// it, renames it over <name>.mode and fsyncs the checkpoints directory
// (and the topic directory when the file is new, for a checkpoints
// directory made for it), and returns once that is done; a power loss
// leaves the old mode or the new one. When the file already holds mode it
// does nothing; a checkpoint whose mode is only implied (no file: see
// GroupMode) gets the file. Storing another mode than the stored one is
// not refused here: that is the caller's to decide first. Errors: an
// unknown mode; a mode file that cannot be read or holds anything else
// than a mode (it is left for an operator, never overwritten); the write's
// I/O error (the stored mode is then unknown: GroupMode reads the file
// again); one wrapping contract.ErrClosed after Close.
func (c *Checkpoint) SetGroupMode(mode string) error {
	if mode != contract.GroupExclusive && mode != contract.GroupShared {
		return fmt.Errorf("set group mode %s: unknown mode %q, want %q or %q", c.name, mode, contract.GroupExclusive, contract.GroupShared)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("set group mode %s: %w", c.name, contract.ErrClosed)
	}
	cur, err := c.storedMode()
	if err != nil {
		return fmt.Errorf("set group mode %s: %w", c.name, err)
	}
	if cur == mode {
		return nil
	}
	c.mode = "" // unknown until the write completes
	if err := c.fs.MkdirAll(c.dir); err != nil {
		return fmt.Errorf("create checkpoint dir %s: %w", c.dir, err)
	}
	if err := vfs.ReplaceFile(c.fs, c.modePath(), []byte(mode+"\n"), vfs.ReplaceOptions{}); err != nil {
		return fmt.Errorf("set group mode %s: %w", c.name, err)
	}
	if cur == "" {
		// A new name in the checkpoints directory, which may be new too.
		if err := c.fs.SyncDir(c.topicDir()); err != nil {
			return fmt.Errorf("sync topic dir %s: %w", c.topicDir(), err)
		}
	}
	c.mode = mode
	return nil
}

// storedMode is the content of <name>.mode as a mode, "" when the file
// does not exist. It reads the file once; c.mode keeps what it read or
// SetGroupMode wrote.
func (c *Checkpoint) storedMode() (string, error) {
	if c.mode != "" {
		return c.mode, nil
	}
	p := c.modePath()
	f, err := c.fs.Open(p)
	if vfs.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("open group mode %s: %w%s", p, err, fdHint(err))
	}
	data, err := readWhole(f)
	f.Close()
	if err != nil {
		return "", fmt.Errorf("read group mode %s: %w", p, err)
	}
	mode, err := parseGroupMode(data)
	if err != nil {
		return "", fmt.Errorf("group mode %s: %w", p, err)
	}
	c.mode = mode
	return mode, nil
}

// parseGroupMode returns the mode the content b of a .mode file holds, or
// an error saying why it holds none.
func parseGroupMode(b []byte) (string, error) {
	switch string(b) {
	case contract.GroupShared + "\n":
		return contract.GroupShared, nil
	case contract.GroupExclusive + "\n":
		return contract.GroupExclusive, nil
	}
	shown := b
	if len(shown) > 32 {
		shown = shown[:32]
	}
	return "", fmt.Errorf("invalid content %q (%d bytes), want %q or %q", shown, len(b), contract.GroupShared+"\n", contract.GroupExclusive+"\n")
}
