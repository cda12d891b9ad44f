package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// fileMode is dispatchers.json's mode: consumer addresses, signing
// secrets and push header values (an Authorization header) are for the
// broker's user only.
const fileMode = 0o600

// document is dispatchers.json: {"version": 1, "dispatchers": [Spec...]}.
type document struct {
	Version     int    `json:"version"`
	Dispatchers []Spec `json:"dispatchers"`
}

// SpecStore keeps the dispatchers created through the admin API, as one
// list. *Store (dispatchers.json in the data root) is the default; a
// storage backend shared by several broker nodes replaces it (a replicated
// key-value entry) with fx.Decorate(func(admin.SpecStore) admin.SpecStore
// { ... }).
type SpecStore interface {
	// Load returns the stored list (none when nothing was ever stored).
	// An unreadable or invalid store is an error: the broker must not start
	// and silently drop dispatchers.
	Load() ([]Spec, error)
	// Save replaces the list, durably, before it returns. A store shared
	// by several nodes refuses, with an error wrapping ErrConflict, a save
	// based on a list that another node has changed since this node last
	// loaded or was told of it (see SpecWatcher).
	Save(specs []Spec) error
	// Path says where the list is kept, for messages.
	Path() string
}

// SpecWatcher is an optional interface of a SpecStore shared by several
// broker nodes: Watch calls fn with the whole stored list each time
// another node saves it, until stop is called (after stop returns fn is
// not called any more). fn runs on one goroutine of the store's, one list
// at a time. Errors: the store's, when the watch cannot start.
type SpecWatcher interface {
	Watch(fn func([]Spec)) (stop func(), err error)
}

// ErrConflict: an admin change was based on a list of dispatchers that
// another broker node changed in the meantime; nothing was stored. Read
// the dispatcher again and retry (409 CONFLICT).
var ErrConflict = contract.NewError(contract.CodeConflict, "admin: the dispatchers were changed through another broker node; read them again and retry")

// Store reads and writes dispatchers.json. Save replaces the file so that
// a crash at any moment leaves the old or the new content, never a mix:
// write a temporary file, fsync it, rename it over the old one, fsync the
// directory.
type Store struct {
	fs   vfs.FS
	dir  string
	path string
	// BeforeRename, when set (crash tests), runs after the temporary file
	// is fsynced and before it replaces the old one.
	BeforeRename func()
}

// NewStore returns the Store of dir/dispatchers.json on fsys.
func NewStore(fsys vfs.FS, dir string) *Store {
	return &Store{fs: fsys, dir: dir, path: filepath.Join(dir, contract.DispatchersFile)}
}

// Path is the file's path.
func (s *Store) Path() string { return s.path }

// Load returns the dispatchers stored, none when the file does not exist.
// An unreadable or invalid file is an error naming the file and the
// problem: the broker must not start and silently drop dispatchers.
func (s *Store) Load() ([]Spec, error) {
	if ents, derr := s.fs.List(s.path); derr == nil {
		return nil, fmt.Errorf("%s is a directory (%d entries), not the dispatchers file: a topic of that name, published before the name was reserved? Move it out of the data root", s.path, len(ents))
	}
	f, err := s.fs.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.path, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.path, err)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && size > 0 {
		return nil, fmt.Errorf("read %s: %w", s.path, err)
	}
	return DecodeSpecs(b, s.path)
}

// EncodeSpecs is the stored form of the api dispatchers, the same in
// dispatchers.json and in any other SpecStore: {"version": 1,
// "dispatchers": [Spec...]}, indented.
func EncodeSpecs(specs []Spec) ([]byte, error) {
	return json.MarshalIndent(document{Version: 1, Dispatchers: specs}, "", "  ")
}

// DecodeSpecs reads what EncodeSpecs wrote; where names the store in the
// errors (not JSON, or a version other than 1).
func DecodeSpecs(b []byte, where string) ([]Spec, error) {
	var doc document
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s is not valid: %v (fix or remove it; it holds the dispatchers created through the admin API)", where, err)
	}
	if doc.Version != 1 {
		return nil, fmt.Errorf("%s: version %d, want 1", where, doc.Version)
	}
	return doc.Dispatchers, nil
}

// SpecStoreProvider is an optional interface of a storage backend
// (topicqueue.Backend) shared by several broker nodes: it keeps the api
// dispatchers where every node sees them, instead of in each node's
// dispatchers.json.
type SpecStoreProvider interface {
	DispatcherStore() (SpecStore, error)
}

// Save replaces the file's content with specs, durably (see Store).
func (s *Store) Save(specs []Spec) error {
	b, err := EncodeSpecs(specs)
	if err != nil {
		return err
	}
	return vfs.ReplaceFile(s.fs, s.path, append(b, '\n'), vfs.ReplaceOptions{Mode: fileMode, BeforeRename: s.BeforeRename})
}
