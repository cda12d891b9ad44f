package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Op names a MemFS operation for fault injection (see MemFS.SetHook).
type Op uint8

// The operations a MemFS hook sees. Each is reported once per call, before
// the operation is performed.
const (
	OpCreate     Op = iota + 1 // FS.Create
	OpOpen                     // FS.Open and FS.OpenRW
	OpWrite                    // File.WriteAt
	OpSync                     // File.Sync
	OpTruncate                 // File.Truncate
	OpRename                   // FS.Rename (the hook gets oldname)
	OpRemove                   // FS.Remove
	OpMkdir                    // FS.MkdirAll
	OpSyncDir                  // FS.SyncDir
	OpRead                     // File.ReadAt
	OpList                     // FS.List
	OpFreeSpace                // FS.FreeSpace
	OpTotalSpace               // FS.TotalSpace
	OpDatasync                 // File.Datasync
)

var opNames = [...]string{
	OpCreate:     "create",
	OpOpen:       "open",
	OpWrite:      "write",
	OpSync:       "sync",
	OpTruncate:   "truncate",
	OpRename:     "rename",
	OpRemove:     "remove",
	OpMkdir:      "mkdir",
	OpSyncDir:    "syncdir",
	OpRead:       "read",
	OpList:       "list",
	OpFreeSpace:  "freespace",
	OpTotalSpace: "totalspace",
	OpDatasync:   "datasync",
}

// String returns the lower-case name of the operation ("write", "syncdir").
func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// ShortWrite is an error a MemFS hook may return for OpWrite to simulate a
// partial write: the first N bytes of the buffer are written (N is clamped to
// [0, len(p)]) and WriteAt returns (N, Err). A nil Err becomes
// io.ErrShortWrite. Both ShortWrite and *ShortWrite are recognised, also when
// wrapped. Returned for any other Op it is just an error.
type ShortWrite struct {
	N   int   // bytes written before the failure
	Err error // error WriteAt returns
}

// Error implements error.
func (e ShortWrite) Error() string {
	return fmt.Sprintf("vfs: short write of %d bytes: %v", e.N, e.Err)
}

// Unwrap returns Err.
func (e ShortWrite) Unwrap() error { return e.Err }

// CrashOptions selects what MemFS.Crash keeps of the changes made to a
// file's contents since its last Sync (or Datasync). The zero value keeps
// none of them: every file holds exactly its synced contents and size.
//
// There are two models. With SectorSize 0 (the tail models), a file keeps
// its synced contents, and TornTail and ZeroFillTail may keep part of the
// bytes beyond its synced size; unsynced overwrites inside the synced size
// are never kept. With SectorSize > 0 (the sector model), the page cache is
// written back in any order, sector by sector, as on a real disk; see
// SectorSize.
type CrashOptions struct {
	// TornTail keeps a uniformly random prefix (0 to all bytes) of each
	// file's unsynced bytes beyond its synced size, modelling a page cache
	// that was partly flushed when power was lost. Ignored when SectorSize
	// is set.
	TornTail bool
	// ZeroFillTail makes the kept unsynced region zeros instead of the
	// written data, modelling a size update that reached the disk while the
	// data did not. Without TornTail the whole region up to the current size
	// is kept (as zeros). Ignored when SectorSize is set.
	ZeroFillTail bool
	// SectorSize, when positive, selects the sector model with sectors of
	// that many bytes (512 for disk sectors, 4096 for pages; any positive
	// size works); 0 selects the tail models above; negative panics. For
	// each file, with old the contents at its last Sync followed by zeros
	// and new its current contents:
	//   - The file is cut into sectors [k×SectorSize, (k+1)×SectorSize) up
	//     to the larger of the synced and current sizes. Every sector whose
	//     new contents differ from its old ones (appended data and
	//     overwrites inside the synced size alike) holds, independently of
	//     the others, either all its new bytes or all its old ones. Old
	//     bytes beyond the synced size are zeros, so a lost appended sector
	//     reads as zeros, and a sector lying partly inside the synced size
	//     keeps the synced bytes there and zeros after. Unchanged sectors,
	//     and every byte below the synced size that was not overwritten,
	//     keep their synced contents exactly (as far as the size after the
	//     crash reaches). A Truncate that shrinks a file and one that grows
	//     it again overwrite the bytes between with zeros.
	//   - Each file draws its own probability that a changed sector keeps
	//     its new bytes: 0 (nothing written back) with chance 1/8, 1
	//     (everything written back) with chance 1/8, otherwise uniform in
	//     [0, 1). So one crash has almost everything of a file persisted,
	//     another almost nothing, another holes followed by later data.
	//   - The size is drawn independently of the data: the synced size, the
	//     current size, or a uniformly random size from one to the other
	//     (ends included), each with chance 1/3. A size above the current
	//     one (a truncation since the last Sync that did not reach the disk)
	//     shows the synced bytes the truncation cut off, not zeros: bytes
	//     at or beyond the current size count as unchanged. So a file
	//     truncated and rewritten keeps each rewritten sector old or new and
	//     comes back with its old size, its new one, or one between.
	//   - Files are independent of each other.
	// So unlike the tail models, a sector model crash may keep an unsynced
	// overwrite inside the synced size, or a later appended sector without
	// an earlier one; like them, it never changes a synced byte that was
	// not overwritten or truncated away since.
	SectorSize int
	// Rand drives TornTail and the sector model. Nil means a fixed-seed
	// generator, so a crash is reproducible. Files are visited in sorted
	// path order, so a seeded Rand gives the same result for the same FS
	// state.
	Rand *rand.Rand
}

// MemFS is an in-memory FS for tests with crash simulation and fault
// injection, in the spirit of pebble's vfs.NewCrashableMem. It is safe for
// concurrent use: one RWMutex guards the whole FS, so ReadAt calls run in
// parallel with each other and are serialised with writes.
//
// Names: every name is cleaned with filepath.Clean and resolved from a
// single root, which is also the working directory: "/a/b", "a/b" and
// "./a/b" are the same file, and ".", "/" and "" name the root. Directories
// exist only when made with MkdirAll (Create does not make parents).
//
// Errors follow the os package: *fs.PathError (*os.LinkError for Rename)
// wrapping a syscall.Errno, so errors.Is(err, fs.ErrNotExist) and
// errors.Is(err, fs.ErrExist) work as they do with OS. Differences from OS:
// Open of a directory and SyncDir of a file fail with EISDIR and ENOTDIR.
//
// Durability model (what Crash keeps):
//   - The root directory always survives.
//   - A directory entry (a file or directory name created by Create or
//     MkdirAll, moved by Rename, deleted by Remove) changes the durable
//     namespace only when its parent directory is synced with SyncDir;
//     SyncDir(d) makes d's whole current entry list durable, nothing else.
//     A Rename between two directories needs both synced. Until then the
//     old durable entries stay: a removed file comes back with its synced
//     contents, a renamed file is found under its old name.
//   - A surviving directory holds exactly its durable entries, recursively.
//     A directory whose own entry was never made durable vanishes with
//     everything below it.
//   - A surviving file holds the contents and size it had at its last
//     File.Sync or File.Datasync (empty if never synced), whatever was
//     written, truncated or re-created (Create truncates) since, unless
//     CrashOptions keep some of that. A file whose entry never became
//     durable vanishes even when its data was synced.
//   - With the tail models (CrashOptions.SectorSize 0), CrashOptions may
//     keep part of the bytes beyond the synced size; unsynced overwrites
//     inside the synced size are never kept. With the sector model
//     (SectorSize > 0) every changed sector independently keeps its new or
//     old contents, overwrites inside the synced size included, and the
//     size is the synced one, the current one or one between (see
//     CrashOptions.SectorSize). Either way, bytes below the synced size
//     that were not overwritten since are kept exactly, as far as the size
//     after the crash reaches.
//
// Capacity (SetCapacity) counts the current size of every file reachable in
// the namespace; synced copies and files already removed do not count.
type MemFS struct {
	mu       sync.RWMutex
	root     *node
	hook     func(op Op, name string) error
	capacity int64 // 0: unlimited
	used     int64 // bytes of linked files

	syncs    atomic.Int64
	dirSyncs atomic.Int64

	locks memLocks // held Lock names; not part of the namespace
}

var _ FS = (*MemFS)(nil)

// clean marks a node with no unsynced change.
const clean = math.MaxInt64

// node is a file or a directory (an inode). Guarded by MemFS.mu.
type node struct {
	dir bool

	// directories
	children map[string]*node // current entries
	durable  map[string]*node // entries as of the last SyncDir

	// files
	data      []byte // current contents
	synced    []byte // contents at the last Sync; never aliases data
	dirtyFrom int64  // lowest offset changed since the last Sync, or clean
	linked    bool   // reachable in the current namespace (counts to used)
}

func newDir() *node {
	return &node{dir: true, children: map[string]*node{}, durable: map[string]*node{}}
}

func newFile() *node { return &node{dirtyFrom: clean, linked: true} }

// NewMem returns an empty MemFS: only the root directory, no hook, no
// capacity limit.
func NewMem() *MemFS { return &MemFS{root: newDir()} }

// SetHook installs fn, called before every operation listed under Op with
// the operation and the name it works on (the name as passed by the caller;
// for File operations, the name the file was opened with). A non-nil error
// is returned by the operation unchanged, and the operation is not
// performed, except for a ShortWrite returned for OpWrite. fn runs without
// MemFS locks held and may be called from several goroutines at once. Nil
// removes the hook. Test helpers (ReadFile, WriteFile, Crash) skip the hook.
func (m *MemFS) SetHook(fn func(op Op, name string) error) {
	m.mu.Lock()
	m.hook = fn
	m.mu.Unlock()
}

// SetCapacity limits the total size in bytes of all files in the FS. A
// WriteAt that would grow past the limit writes the bytes that fit and
// returns a *fs.PathError{Op: "write", Err: syscall.ENOSPC}; a Truncate that
// would grow past it fails with ENOSPC and changes nothing. Shrinking or
// removing files frees space. bytes <= 0 means unlimited (the default).
// Lowering the limit below the current usage removes nothing.
func (m *MemFS) SetCapacity(bytes int64) {
	m.mu.Lock()
	m.capacity = max(bytes, 0)
	m.mu.Unlock()
}

// SyncCount returns the number of durability calls on files of this MemFS:
// File.Sync and File.Datasync (and SyncFS), including calls failed by the
// hook but not calls on closed files.
func (m *MemFS) SyncCount() int64 { return m.syncs.Load() }

// SyncDirCount returns the number of SyncDir calls on this MemFS, including
// calls failed by the hook.
func (m *MemFS) SyncDirCount() int64 { return m.dirSyncs.Load() }

func (m *MemFS) callHook(op Op, name string) error {
	m.mu.RLock()
	h := m.hook
	m.mu.RUnlock()
	if h == nil {
		return nil
	}
	return h(op, name)
}

// split cleans name into path components below the root.
func split(name string) []string {
	p := filepath.ToSlash(filepath.Clean(name))
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			// After Clean ".." only leads a path: the root is its own parent.
			continue
		}
		out = append(out, c)
	}
	return out
}

// lookup returns the node at comps. Callers hold mu.
func (m *MemFS) lookup(comps []string) (*node, syscall.Errno) {
	n := m.root
	for _, c := range comps {
		if !n.dir {
			return nil, syscall.ENOTDIR
		}
		child, ok := n.children[c]
		if !ok {
			return nil, syscall.ENOENT
		}
		n = child
	}
	return n, 0
}

// parent returns the directory holding name and name's last component; the
// component is "" for the root. Callers hold mu.
func (m *MemFS) parent(name string) (*node, string, syscall.Errno) {
	comps := split(name)
	if len(comps) == 0 {
		return nil, "", 0
	}
	dir, errno := m.lookup(comps[:len(comps)-1])
	if errno != 0 {
		return nil, "", errno
	}
	if !dir.dir {
		return nil, "", syscall.ENOTDIR
	}
	return dir, comps[len(comps)-1], 0
}

// resize sets n's size, zeroing any new bytes and charging used. Callers
// hold mu and have checked capacity.
func (m *MemFS) resize(n *node, size int64) {
	old := int64(len(n.data))
	switch {
	case size < old:
		n.data = n.data[:size]
	case size > old:
		n.data = slices.Grow(n.data, int(size-old))[:size]
		clear(n.data[old:])
	}
	if n.linked {
		m.used += size - old
	}
	n.dirtyFrom = min(n.dirtyFrom, size, old)
}

// unlink takes n out of the current namespace and frees its bytes.
func (m *MemFS) unlink(n *node) {
	if !n.dir && n.linked {
		m.used -= int64(len(n.data))
		n.linked = false
	}
}

// Create implements FS. Missing parent: fs.ErrNotExist; name is a
// directory: EISDIR. An existing file keeps its identity (open handles see
// the truncation) and its synced contents until the next Sync.
func (m *MemFS) Create(name string) (File, error) {
	if err := m.callHook(OpCreate, name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, errno := m.parent(name)
	if errno == 0 && base == "" {
		errno = syscall.EISDIR
	}
	if errno != 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errno}
	}
	n, ok := dir.children[base]
	switch {
	case ok && n.dir:
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	case ok:
		m.resize(n, 0)
	default:
		n = newFile()
		dir.children[base] = n
	}
	return &memFile{fs: m, n: n, name: name}, nil
}

// OpenRW implements FS. Missing: fs.ErrNotExist; a directory: EISDIR.
func (m *MemFS) OpenRW(name string) (File, error) { return m.open(name, false) }

// Open implements FS. The file's WriteAt fails with EBADF and Truncate with
// EINVAL, as with os. Missing: fs.ErrNotExist; a directory: EISDIR.
func (m *MemFS) Open(name string) (File, error) { return m.open(name, true) }

func (m *MemFS) open(name string, readOnly bool) (File, error) {
	if err := m.callHook(OpOpen, name); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, errno := m.lookup(split(name))
	if errno == 0 && n.dir {
		errno = syscall.EISDIR
	}
	if errno != 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errno}
	}
	return &memFile{fs: m, n: n, name: name, readOnly: readOnly}, nil
}

// Remove implements FS. Missing: fs.ErrNotExist; a non-empty directory:
// ENOTEMPTY; the root: EBUSY. Open handles of a removed file keep working.
func (m *MemFS) Remove(name string) error {
	if err := m.callHook(OpRemove, name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	dir, base, errno := m.parent(name)
	if errno == 0 && base == "" {
		errno = syscall.EBUSY
	}
	var n *node
	if errno == 0 {
		var ok bool
		if n, ok = dir.children[base]; !ok {
			errno = syscall.ENOENT
		} else if n.dir && len(n.children) > 0 {
			errno = syscall.ENOTEMPTY
		}
	}
	if errno != 0 {
		return &fs.PathError{Op: "remove", Path: name, Err: errno}
	}
	delete(dir.children, base)
	m.unlink(n)
	return nil
}

// Rename implements FS with rename(2) semantics: an existing file or empty
// directory at newname is replaced. Errors are *os.LinkError wrapping
// ENOENT, ENOTDIR, EISDIR (file over directory), ENOTEMPTY, or EINVAL
// (directory into itself). The hook sees OpRename with oldname.
func (m *MemFS) Rename(oldname, newname string) error {
	if err := m.callHook(OpRename, oldname); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if errno := m.rename(oldname, newname); errno != 0 {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: errno}
	}
	return nil
}

func (m *MemFS) rename(oldname, newname string) syscall.Errno {
	odir, obase, errno := m.parent(oldname)
	if errno != 0 {
		return errno
	}
	ndir, nbase, errno := m.parent(newname)
	if errno != 0 {
		return errno
	}
	if obase == "" || nbase == "" {
		return syscall.EBUSY
	}
	n, ok := odir.children[obase]
	if !ok {
		return syscall.ENOENT
	}
	target, exists := ndir.children[nbase]
	if exists && target == n {
		return 0
	}
	if n.dir {
		// newname must not lie inside oldname.
		d := m.root
		for _, c := range split(newname) {
			if d == n {
				return syscall.EINVAL
			}
			d = d.children[c]
		}
	}
	if exists {
		switch {
		case !n.dir && target.dir:
			return syscall.EISDIR
		case n.dir && !target.dir:
			return syscall.ENOTDIR
		case target.dir && len(target.children) > 0:
			return syscall.ENOTEMPTY
		}
		m.unlink(target)
	}
	delete(odir.children, obase)
	ndir.children[nbase] = n
	return 0
}

// MkdirAll implements FS. A path component that is a file: ENOTDIR. New
// directories are durable only once their parent is synced with SyncDir.
func (m *MemFS) MkdirAll(dir string) error {
	if err := m.callHook(OpMkdir, dir); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.root
	for _, c := range split(dir) {
		child, ok := n.children[c]
		if !ok {
			child = newDir()
			n.children[c] = child
		} else if !child.dir {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		n = child
	}
	return nil
}

// List implements FS. Missing: fs.ErrNotExist; a file: ENOTDIR.
func (m *MemFS) List(dir string) ([]DirEntry, error) {
	if err := m.callHook(OpList, dir); err != nil {
		return nil, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, errno := m.lookup(split(dir))
	if errno == 0 && !n.dir {
		errno = syscall.ENOTDIR
	}
	if errno != 0 {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: errno}
	}
	out := make([]DirEntry, 0, len(n.children))
	for _, name := range slices.Sorted(maps.Keys(n.children)) {
		out = append(out, DirEntry{Name: name, IsDir: n.children[name].dir})
	}
	return out, nil
}

// FreeSpace implements FS: the capacity left (SetCapacity minus the bytes
// of every file), 0 when usage is at or over it, and math.MaxInt64 when no
// capacity is set. dir must exist (fs.ErrNotExist, ENOTDIR for a file).
// The hook sees OpFreeSpace with dir.
func (m *MemFS) FreeSpace(dir string) (int64, error) {
	return m.statfs(OpFreeSpace, dir, func() int64 { return max(m.capacity-m.used, 0) })
}

// TotalSpace implements FS: the capacity set by SetCapacity, or
// math.MaxInt64 when none is set. dir must exist (fs.ErrNotExist, ENOTDIR
// for a file). The hook sees OpTotalSpace with dir.
func (m *MemFS) TotalSpace(dir string) (int64, error) {
	return m.statfs(OpTotalSpace, dir, func() int64 { return m.capacity })
}

// statfs is FreeSpace and TotalSpace: the hook, dir's checks, then size()
// under the read lock (math.MaxInt64 when no capacity is set).
func (m *MemFS) statfs(op Op, dir string, size func() int64) (int64, error) {
	if err := m.callHook(op, dir); err != nil {
		return 0, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, errno := m.lookup(split(dir))
	if errno == 0 && !n.dir {
		errno = syscall.ENOTDIR
	}
	if errno != 0 {
		return 0, &fs.PathError{Op: "statfs", Path: dir, Err: errno}
	}
	if m.capacity == 0 {
		return math.MaxInt64, nil
	}
	return size(), nil
}

// SyncDir implements FS: dir's current entries become its durable entries.
// Missing: fs.ErrNotExist; a file: ENOTDIR.
func (m *MemFS) SyncDir(dir string) error {
	m.dirSyncs.Add(1)
	if err := m.callHook(OpSyncDir, dir); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n, errno := m.lookup(split(dir))
	if errno == 0 && !n.dir {
		errno = syscall.ENOTDIR
	}
	if errno != 0 {
		return &fs.PathError{Op: "sync", Path: dir, Err: errno}
	}
	n.durable = maps.Clone(n.children)
	return nil
}

// ReadFile returns a copy of the current contents of file name, synced or
// not. It skips the hook. Missing: fs.ErrNotExist; a directory: EISDIR.
func (m *MemFS) ReadFile(name string) ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, errno := m.lookup(split(name))
	if errno == 0 && n.dir {
		errno = syscall.EISDIR
	}
	if errno != 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: errno}
	}
	return slices.Clone(n.data), nil
}

// WriteFile sets the contents of file name to data, creating the file and
// any missing parent directories. Every directory on the path is made
// durable (as if created and its parent synced). With synced true the file's
// entry and data are durable too (as if written, Sync'ed and its directory
// synced); with false only the current data is set, and a new file's entry
// is not durable. It skips the hook and the capacity limit, though the bytes
// count toward it. A path component that is a file: ENOTDIR; name is a
// directory: EISDIR.
func (m *MemFS) WriteFile(name string, data []byte, synced bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	comps := split(name)
	if len(comps) == 0 {
		return &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	dir := m.root
	for _, c := range comps[:len(comps)-1] {
		child, ok := dir.children[c]
		if !ok {
			child = newDir()
			dir.children[c] = child
		} else if !child.dir {
			return &fs.PathError{Op: "mkdir", Path: name, Err: syscall.ENOTDIR}
		}
		dir.durable[c] = child
		dir = child
	}
	base := comps[len(comps)-1]
	n, ok := dir.children[base]
	if ok && n.dir {
		return &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	if !ok {
		n = newFile()
		dir.children[base] = n
	}
	m.resize(n, 0)
	m.resize(n, int64(len(data)))
	copy(n.data, data)
	if synced {
		n.synced = slices.Clone(data)
		n.dirtyFrom = clean
		dir.durable[base] = n
	}
	return nil
}

// Crash returns a new MemFS holding what would survive a power loss at
// this instant, following the durability model in the MemFS doc comment
// and opts. The new FS has the same capacity, no hook and zero counters;
// everything in it is durable. m is not changed and stays usable, as do its
// open files, which keep writing to m only.
func (m *MemFS) Crash(opts CrashOptions) *MemFS {
	if opts.SectorSize < 0 {
		panic(fmt.Sprintf("vfs: CrashOptions.SectorSize %d is negative", opts.SectorSize))
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	rng := opts.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(1, 2))
	}
	out := &MemFS{capacity: m.capacity}
	c := crasher{out: out, opts: opts, rng: rng, visiting: map[*node]bool{}}
	out.root = c.dir(m.root)
	return out
}

// SyncFS implements FSSyncer: every file's contents and every directory's
// entries become durable, as syncfs(2) makes them on a real filesystem.
// dir only has to exist.
func (m *MemFS) SyncFS(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n, errno := m.lookup(split(dir)); errno != 0 || !n.dir {
		if errno == 0 {
			errno = syscall.ENOTDIR
		}
		return &fs.PathError{Op: "syncfs", Path: dir, Err: errno}
	}
	m.syncs.Add(1)
	seen := map[*node]bool{}
	var walk func(n *node)
	walk = func(n *node) {
		if seen[n] {
			return
		}
		seen[n] = true
		if !n.dir {
			n.synced, n.dirtyFrom = slices.Clone(n.data), clean
			if n.synced == nil {
				n.synced = []byte{}
			}
			return
		}
		n.durable = maps.Clone(n.children)
		for _, c := range n.children {
			walk(c)
		}
	}
	walk(m.root)
	return nil
}

// Kill returns a new MemFS holding what a process crash (kill -9) at this
// instant leaves: everything, as the page cache survives the process. What
// was not yet synced stays unsynced, contents and directory entries alike,
// so a Crash of the result still drops it: a killed process followed,
// later, by a power loss. The new FS has the same capacity, no hook, zero
// counters and no locks held (they die with the process).
func (m *MemFS) Kill() *MemFS {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := &MemFS{capacity: m.capacity, used: m.used}
	memo := map[*node]*node{}
	var clone func(n *node) *node
	clone = func(n *node) *node {
		if c, ok := memo[n]; ok {
			return c
		}
		c := &node{dir: n.dir, data: slices.Clone(n.data), synced: slices.Clone(n.synced), dirtyFrom: n.dirtyFrom, linked: n.linked}
		memo[n] = c
		if n.dir {
			c.children, c.durable = make(map[string]*node, len(n.children)), make(map[string]*node, len(n.durable))
			for name, ch := range n.children {
				c.children[name] = clone(ch)
			}
			for name, ch := range n.durable {
				c.durable[name] = clone(ch)
			}
		}
		return c
	}
	out.root = clone(m.root)
	return out
}

type crasher struct {
	out      *MemFS
	opts     CrashOptions
	rng      *rand.Rand
	visiting map[*node]bool // directories on the current path
}

func (c *crasher) dir(d *node) *node {
	c.visiting[d] = true
	defer delete(c.visiting, d)
	nd := newDir()
	// Sorted, so that a seeded Rand gives reproducible crashes.
	for _, name := range slices.Sorted(maps.Keys(d.durable)) {
		child := d.durable[name]
		var nc *node
		switch {
		case child.dir && c.visiting[child]:
			// Durable entries can form a cycle after directory renames
			// synced in one directory only; a real fsck would detach it.
			continue
		case child.dir:
			nc = c.dir(child)
		default:
			nc = c.file(child)
		}
		nd.children[name] = nc
		nd.durable[name] = nc
	}
	return nd
}

func (c *crasher) file(f *node) *node {
	var data []byte
	if c.opts.SectorSize > 0 {
		data = c.sectors(f)
	} else {
		data = c.tail(f)
	}
	if data == nil {
		data = []byte{}
	}
	c.out.used += int64(len(data))
	return &node{data: data, synced: slices.Clone(data), dirtyFrom: clean, linked: true}
}

// tail is the tail models: the synced contents, then TornTail and
// ZeroFillTail's part of the bytes beyond the synced size.
func (c *crasher) tail(f *node) []byte {
	data := slices.Clone(f.synced)
	if extra := len(f.data) - len(f.synced); extra > 0 {
		keep := 0
		switch {
		case c.opts.TornTail:
			keep = c.rng.IntN(extra + 1)
		case c.opts.ZeroFillTail:
			keep = extra
		}
		if c.opts.ZeroFillTail {
			data = append(data, make([]byte, keep)...)
		} else {
			data = append(data, f.data[len(f.synced):len(f.synced)+keep]...)
		}
	}
	return data
}

// sectors is the sector model (see CrashOptions.SectorSize).
func (c *crasher) sectors(f *node) []byte {
	if f.dirtyFrom == clean {
		return slices.Clone(f.synced)
	}
	oldSize, newSize := len(f.synced), len(f.data)
	// img starts as the old contents: the synced bytes, then zeros.
	img := make([]byte, max(oldSize, newSize))
	copy(img, f.synced)
	var p float64
	switch c.rng.IntN(8) {
	case 0:
	case 1:
		p = 1
	default:
		p = c.rng.Float64()
	}
	// Below dirtyFrom nothing changed; at or beyond newSize, bytes count as
	// unchanged (a truncation's lost size shows the old bytes).
	ss := c.opts.SectorSize
	for lo := int(min(f.dirtyFrom, int64(newSize))) / ss * ss; lo < newSize; lo += ss {
		hi := min(lo+ss, newSize)
		if bytes.Equal(img[lo:hi], f.data[lo:hi]) {
			continue
		}
		if c.rng.Float64() < p {
			copy(img[lo:hi], f.data[lo:hi])
		}
	}
	size := oldSize
	switch c.rng.IntN(3) {
	case 1:
		size = newSize
	case 2:
		lo, hi := min(oldSize, newSize), max(oldSize, newSize)
		size = lo + c.rng.IntN(hi-lo+1)
	}
	return img[:size]
}

// memFile is an open MemFS file.
type memFile struct {
	fs       *MemFS
	n        *node
	name     string
	readOnly bool
	closed   atomic.Bool
}

func (f *memFile) errClosed(op string) error {
	return &fs.PathError{Op: op, Path: f.name, Err: fs.ErrClosed}
}

// ReadAt implements File.
func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if f.closed.Load() {
		return 0, f.errClosed("read")
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "readat", Path: f.name, Err: syscall.EINVAL}
	}
	if err := f.fs.callHook(OpRead, f.name); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	f.fs.mu.RLock()
	defer f.fs.mu.RUnlock()
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.n.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt implements File.
func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if f.closed.Load() {
		return 0, f.errClosed("write")
	}
	if f.readOnly {
		return 0, &fs.PathError{Op: "write", Path: f.name, Err: syscall.EBADF}
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "writeat", Path: f.name, Err: syscall.EINVAL}
	}
	var hookErr error
	if err := f.fs.callHook(OpWrite, f.name); err != nil {
		var sw ShortWrite
		var psw *ShortWrite
		switch {
		case errors.As(err, &sw):
		case errors.As(err, &psw) && psw != nil:
			sw = *psw
		default:
			return 0, err
		}
		p = p[:min(max(sw.N, 0), len(p))]
		hookErr = sw.Err
		if hookErr == nil {
			hookErr = io.ErrShortWrite
		}
	}
	m := f.fs
	m.mu.Lock()
	defer m.mu.Unlock()
	n := f.n
	size := int64(len(n.data))
	end := off + int64(len(p))
	if m.capacity > 0 && n.linked && end > size && end-size > m.capacity-m.used {
		fit := size + max(m.capacity-m.used, 0) - off
		p = p[:min(max(fit, 0), int64(len(p)))]
		end = off + int64(len(p))
		hookErr = &fs.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
	}
	if len(p) == 0 {
		return 0, hookErr
	}
	if end > size {
		m.resize(n, end)
	}
	copy(n.data[off:], p)
	n.dirtyFrom = min(n.dirtyFrom, off, size)
	return len(p), hookErr
}

// Sync implements File: the current contents and size become durable.
func (f *memFile) Sync() error { return f.sync(OpSync, "sync") }

// Datasync implements File. MemFS models only data and sizes, so it has
// the same effect as Sync; the hook sees OpDatasync, and SyncCount counts
// it too.
func (f *memFile) Datasync() error { return f.sync(OpDatasync, "datasync") }

// sync is Sync and Datasync: op is reported to the hook, name goes into
// the error for a closed file.
func (f *memFile) sync(op Op, name string) error {
	if f.closed.Load() {
		return f.errClosed(name)
	}
	f.fs.syncs.Add(1)
	if err := f.fs.callHook(op, f.name); err != nil {
		return err
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	n := f.n
	if n.dirtyFrom == clean {
		return nil
	}
	// Bytes below dirtyFrom are unchanged since the last Sync: copy only the
	// rest, so appending and syncing costs what was appended.
	keep := min(n.dirtyFrom, int64(len(n.data)), int64(len(n.synced)))
	n.synced = append(n.synced[:keep], n.data[keep:]...)
	n.dirtyFrom = clean
	return nil
}

// Truncate implements File. Growing past the capacity fails with ENOSPC.
func (f *memFile) Truncate(size int64) error {
	if f.closed.Load() {
		return f.errClosed("truncate")
	}
	if f.readOnly || size < 0 {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: syscall.EINVAL}
	}
	if err := f.fs.callHook(OpTruncate, f.name); err != nil {
		return err
	}
	m := f.fs
	m.mu.Lock()
	defer m.mu.Unlock()
	grow := size - int64(len(f.n.data))
	if m.capacity > 0 && f.n.linked && grow > 0 && grow > m.capacity-m.used {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: syscall.ENOSPC}
	}
	m.resize(f.n, size)
	return nil
}

// Size implements File.
func (f *memFile) Size() (int64, error) {
	if f.closed.Load() {
		return 0, f.errClosed("stat")
	}
	f.fs.mu.RLock()
	defer f.fs.mu.RUnlock()
	return int64(len(f.n.data)), nil
}

// Close implements File. A second Close fails with fs.ErrClosed.
func (f *memFile) Close() error {
	if f.closed.Swap(true) {
		return f.errClosed("close")
	}
	return nil
}
