package storage

import (
	"bytes"
	"fmt"
	"path/filepath"

	"github.com/mmmq/mmmq/modules/contract"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Incarnation file layout (on-disk format, do not change):
//
//	<topic>/incarnation
//	+----------------------------------+----+
//	| 32 lower-case hex digits (16 B)  | \n |   33 bytes
//	+----------------------------------+----+
//
// The incarnation id is a random id made when the topic directory is
// created, before its first segment exists, so that no message of the topic
// is ever acknowledged without it. Deleting a topic and publishing to it
// again starts offsets at 0 under a new id: a consumer that remembers
// offsets keys them by (incarnation, offset). A topic directory without the
// file (written before incarnation ids existed, or a crash between the
// directory and the file, when nothing was acknowledged yet) gets a new id
// when it opens. It is written through IncarnationFile+vfs.TmpExt, fsynced,
// renamed and the directory fsynced, so a crash leaves the whole id or
// none (a leftover .tmp is removed by repair).
const (
	// IncarnationFile is the name of the incarnation id file in a topic
	// directory.
	IncarnationFile = "incarnation"
	// incarnationHex is the number of hex digits of an id.
	incarnationHex = 32
)

// validIncarnation reports whether id is 32 lower-case hex digits.
func validIncarnation(id string) bool {
	if len(id) != incarnationHex {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ReadIncarnation returns the incarnation id stored in topic directory dir,
// or "" (and no error) when the file does not exist. A file that is not 32
// hex digits and a newline is a *contract.CorruptionError naming it.
func ReadIncarnation(fsys vfs.FS, dir string) (string, error) {
	path := filepath.Join(dir, IncarnationFile)
	f, err := fsys.Open(path)
	if vfs.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("open %s: %w%s", path, err, fdHint(err))
	}
	defer f.Close()
	buf := make([]byte, incarnationHex+2)
	n, _ := f.ReadAt(buf, 0)
	id := string(bytes.TrimSuffix(buf[:n], []byte("\n")))
	if n != incarnationHex+1 || buf[incarnationHex] != '\n' || !validIncarnation(id) {
		return "", &contract.CorruptionError{Topic: filepath.Base(dir), File: path, Pos: 0, Offset: -1,
			Reason: fmt.Sprintf("incarnation file is not %d hex digits and a newline (%d bytes); remove it to give the topic a new incarnation id", incarnationHex, n),
			Err:    contract.ErrCorrupt}
	}
	return id, nil
}

// WriteIncarnation stores id in topic directory dir durably: it writes
// incarnation.tmp, fsyncs it, renames it over incarnation and fsyncs dir.
func WriteIncarnation(fsys vfs.FS, dir, id string) error {
	if !validIncarnation(id) {
		return fmt.Errorf("write incarnation: invalid id %q (want %d lower-case hex digits)", id, incarnationHex)
	}
	path := filepath.Join(dir, IncarnationFile)
	if err := vfs.ReplaceFile(fsys, path, []byte(id+"\n"), vfs.ReplaceOptions{}); err != nil {
		return fmt.Errorf("write incarnation: %w%s", err, fdHint(err))
	}
	return nil
}
