package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// PauseRecord is one paused dispatcher in paused.json: its name, who
// paused it ("admin" or "auto") and when.
type PauseRecord struct {
	Name   string                 `json:"name"`
	Reason dispatcher.PauseReason `json:"reason"`
	At     time.Time              `json:"at"`
}

// pauseDocument is paused.json: {"version": 1, "paused": [PauseRecord...]},
// sorted by name.
type pauseDocument struct {
	Version int           `json:"version"`
	Paused  []PauseRecord `json:"paused"`
}

// PauseFile reads and writes paused.json in the data root: every paused
// dispatcher, whatever declared it, so that a pause survives a restart
// (an api dispatcher's pause is in dispatchers.json too). Save replaces
// the file as Store does: a temporary file, fsynced, renamed over the old
// one, the directory fsynced; a crash leaves the old or the new record.
type PauseFile struct {
	fs   vfs.FS
	path string
}

// NewPauseFile returns the PauseFile of dir/paused.json on fsys.
func NewPauseFile(fsys vfs.FS, dir string) *PauseFile {
	return &PauseFile{fs: fsys, path: filepath.Join(dir, contract.PausedFile)}
}

// Path is the file's path.
func (p *PauseFile) Path() string { return p.path }

// Load returns the records by name, none when the file does not exist. An
// unreadable or invalid file is an error naming it: the broker must not
// start and silently resume paused dispatchers.
func (p *PauseFile) Load() (map[string]PauseRecord, error) {
	f, err := p.fs.Open(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]PauseRecord{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p.path, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p.path, err)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && size > 0 {
		return nil, fmt.Errorf("read %s: %w", p.path, err)
	}
	var doc pauseDocument
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s is not valid: %v (fix or remove it; it holds the paused dispatchers)", p.path, err)
	}
	if doc.Version != 1 {
		return nil, fmt.Errorf("%s: version %d, want 1", p.path, doc.Version)
	}
	out := make(map[string]PauseRecord, len(doc.Paused))
	for _, r := range doc.Paused {
		out[r.Name] = r
	}
	return out, nil
}

// Save replaces the file with recs, durably, before it returns.
func (p *PauseFile) Save(recs map[string]PauseRecord) error {
	doc := pauseDocument{Version: 1, Paused: make([]PauseRecord, 0, len(recs))}
	for _, r := range recs {
		doc.Paused = append(doc.Paused, r)
	}
	slices.SortFunc(doc.Paused, func(a, b PauseRecord) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := vfs.ReplaceFile(p.fs, p.path, append(b, '\n'), vfs.ReplaceOptions{Mode: fileMode}); err != nil {
		return fmt.Errorf("admin: store %s: %w", p.path, err)
	}
	return nil
}
