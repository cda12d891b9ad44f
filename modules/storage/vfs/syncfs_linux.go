//go:build linux

package vfs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// syncfsDurable names the filesystems whose syncfs(2) is known to make
// every file and directory entry durable, by statfs(2) f_type. Others are
// not trusted: FUSE (0x65735546) accepts syncfs and returns 0 while
// forwarding nothing to the daemon (the kernel forwards it only for
// virtiofs), so what its page cache holds stays unsynced; a filesystem not
// listed here cannot be proven otherwise.
var syncfsDurable = map[int64]string{
	0xEF53:     "ext2/3/4",
	0x58465342: "xfs",
	0x9123683E: "btrfs",
	0xF2F52010: "f2fs",
	0x2FC12FC1: "zfs",
	0x794C7630: "overlayfs", // syncs its upper filesystem
	0x01021994: "tmpfs",     // nothing to write back: memory only
}

// fuseMagic is FUSE's statfs(2) f_type.
const fuseMagic = 0x65735546

// SyncFS implements FSSyncer with syncfs(2) on the filesystem holding dir:
// one call makes every file and directory entry written to it durable
// (and, since Linux 5.8, reports a writeback error any of them met). On a
// filesystem whose syncfs is not known to do that (FUSE, where it is a
// no-op, or any type not in the list above) it syncs nothing and returns
// an error wrapping errors.ErrUnsupported that names the type, so the
// caller fsyncs file by file.
func (OS) SyncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync filesystem of %s: %w", dir, err)
	}
	defer f.Close()
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("sync filesystem of %s: statfs: %w", dir, err)
	}
	if err := syncfsTrusted(int64(st.Type)); err != nil {
		return fmt.Errorf("sync filesystem of %s: %w", dir, err)
	}
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("sync filesystem of %s: %w", dir, err)
	}
	return nil
}

// syncfsTrusted returns nil when syncfs(2) on a filesystem of statfs
// type magic is known to make everything durable, else an error wrapping
// errors.ErrUnsupported that names the type.
func syncfsTrusted(magic int64) error {
	if _, ok := syncfsDurable[magic]; ok {
		return nil
	}
	if magic == fuseMagic {
		return fmt.Errorf("syncfs(2) is a no-op on FUSE (statfs type %#x): %w", magic, errors.ErrUnsupported)
	}
	return fmt.Errorf("syncfs(2) is not known to be durable on statfs type %#x: %w", magic, errors.ErrUnsupported)
}
