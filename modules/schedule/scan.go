package schedule

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// scanResult is what a scan of one bucket file found.
type scanResult struct {
	pending []entry // scheduled and not done, sorted by due time then file order
	end     int64   // end of the last whole record
	size    int64   // the file's size: above end when a tail was cut short
	done    int     // delivered or cancelled entries
}

// scanFile reads every record of f (whose size is size): the pending
// entries and where the valid records end (see the package documentation,
// Recovery). Memory: one record at a time plus the pending entries'
// metadata; a done record's id set lives only during the scan.
func scanFile(f vfs.File, size int64) (scanResult, error) {
	res := scanResult{size: size}
	var hdr [headerLen]byte
	var buf []byte
	var order []entry
	doneIDs := map[string]bool{}
	pos := int64(0)
	for pos+headerLen <= size {
		if _, err := f.ReadAt(hdr[:], pos); err != nil {
			return res, fmt.Errorf("read at %d: %w", pos, err)
		}
		n := int64(binary.LittleEndian.Uint32(hdr[:4]))
		if n == 0 || n > maxRecord || pos+headerLen+n > size {
			break
		}
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		b := buf[:n]
		if _, err := f.ReadAt(b, pos+headerLen); err != nil && !errors.Is(err, io.EOF) {
			return res, fmt.Errorf("read at %d: %w", pos, err)
		}
		if crc32.Checksum(b, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
			break
		}
		kind, e, _, err := decodeBody(b)
		if err != nil {
			break
		}
		if kind == kindScheduled {
			e.off, e.n = pos, int(headerLen+n)
			order = append(order, e)
		} else {
			doneIDs[e.id] = true
		}
		pos += headerLen + n
	}
	res.end = pos
	for _, e := range order {
		if doneIDs[e.id] {
			res.done++
			continue
		}
		res.pending = append(res.pending, e)
	}
	slices.SortStableFunc(res.pending, func(a, b entry) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	return res, nil
}

// readMessage reads the stored message of e from f.
func readMessage(f vfs.File, e entry) ([]byte, error) {
	b := make([]byte, e.n-headerLen)
	if _, err := f.ReadAt(b, e.off+headerLen); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	_, _, msgAt, err := decodeBody(b)
	if err != nil {
		return nil, err
	}
	return b[msgAt:], nil
}
