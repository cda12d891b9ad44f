package schedule

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// entryCost is what one entry of a loaded window costs in memory, about:
// the entry (id, topic, due time, place, high watermark), its id string
// and its slot in the id index of the scan. The memory budget is divided
// by it.
const entryCost = 200

// walkFile calls fn for every whole record of f (whose size is size), in
// file order, and returns where the valid records end: the first record
// that is cut short, has a length of 0 or over the limit, fails its CRC
// or does not decode ends the file (see the package documentation,
// Recovery). Memory: a read buffer of readChunk bytes (or one record,
// when larger). The file is read in chunks, not a record at a time: one
// system call per readChunk bytes.
func walkFile(f vfs.File, size int64, fn func(kind byte, e entry)) (end int64, err error) {
	r := chunkReader{f: f, size: size}
	pos := int64(0)
	for {
		n, kind, e, ok, err := recordAt(&r, pos, size)
		if err != nil {
			return pos, err
		}
		if !ok {
			return pos, nil
		}
		e.off, e.n = pos, int(n)
		fn(kind, e)
		pos += n
	}
}

// recordAt reads the record at pos of a file of size bytes through r:
// its length, header included, its kind and entry (off and n unset); ok
// false when no valid record starts there (cut short by the end of the
// file, a length of 0 or over the limit, a CRC that fails or a body that
// does not decode). Every reader of the records goes through it: the
// scans, recovery's search for a valid record after damage
// (validAfterDamage) and the count of what a cut removes (inspectTail).
func recordAt(r *chunkReader, pos, size int64) (n int64, kind byte, e entry, ok bool, err error) {
	if pos+headerLen > size {
		return 0, 0, e, false, nil
	}
	hdr, err := r.at(pos, headerLen)
	if err != nil {
		return 0, 0, e, false, fmt.Errorf("read at %d: %w", pos, err)
	}
	l := int64(binary.LittleEndian.Uint32(hdr[:4]))
	sum := binary.LittleEndian.Uint32(hdr[4:])
	if l == 0 || l > maxRecord || pos+headerLen+l > size {
		return 0, 0, e, false, nil
	}
	b, err := r.at(pos+headerLen, l)
	if err != nil {
		return 0, 0, e, false, fmt.Errorf("read at %d: %w", pos, err)
	}
	if crc32.Checksum(b, castagnoli) != sum {
		return 0, 0, e, false, nil
	}
	kind, e, _, err = decodeBody(b)
	if err != nil {
		return 0, 0, e, false, nil
	}
	return headerLen + l, kind, e, true, nil
}

// readChunk is how much walkFile reads at once.
const readChunk = 1 << 20

// chunkReader reads a file through one buffer of at least readChunk bytes.
type chunkReader struct {
	f     vfs.File
	size  int64
	buf   []byte
	start int64 // file position of buf[0]
}

// at returns n bytes at pos (valid until the next call).
func (r *chunkReader) at(pos, n int64) ([]byte, error) {
	if pos >= r.start && pos+n <= r.start+int64(len(r.buf)) {
		return r.buf[pos-r.start : pos-r.start+n], nil
	}
	want := min(max(n, readChunk), r.size-pos)
	if int64(cap(r.buf)) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	r.start = pos
	if _, err := r.f.ReadAt(r.buf, pos); err != nil && !errors.Is(err, io.EOF) {
		r.buf = r.buf[:0]
		return nil, err
	}
	return r.buf[:n], nil
}

// window is the part of a bucket file's pending entries a scan loaded.
type window struct {
	pending []entry // sorted by due time, then place in the file
	// more: pending entries may exist at or after bound (the scan kept
	// only the earliest ones); the next window starts at bound.
	more    bool
	bound   entry // only at and off are set
	end     int64 // end of the last whole record
	records int64 // whole records before end, every kind
}

// first is the lowest possible window start.
var first = entry{at: math.MinInt64, off: -1}

// scanWindow reads f and returns its pending entries ordered at or after
// lo (by due time, then place), at most max of them: an entry is pending
// while no delivered or cancelled record of its id and no dropped record
// of its topic follows it. skip, when not nil, leaves entries out (not
// yet fsynced; another topic's). Memory: max entries, whatever the size of the file; the
// done records need no index, because a done record always follows its
// scheduled record: it removes the entry from the kept ones, or concerns
// one not kept.
//
// When more than max pending entries are at or after lo, the scan keeps
// the max earliest seen so far, and every entry it had to drop is at or
// after the returned bound: the window holds exactly the pending entries
// in [lo, bound).
func scanWindow(f vfs.File, size int64, lo entry, max int, skip func(e entry) bool) (window, error) {
	h := &entryHeap{pos: map[string]int{}}
	w := window{}
	topics := map[string]string{} // interned topic names
	end, err := walkFile(f, size, func(kind byte, e entry) {
		w.records++
		switch kind {
		case kindScheduled:
			if e.before(lo) || skip != nil && skip(e) || w.more && !e.before(w.bound) {
				return
			}
			if t, ok := topics[e.topic]; ok {
				e.topic = t
			} else {
				topics[e.topic] = e.topic
			}
			e.hwm = -1
			if h.Len() == max {
				if !h.ordered {
					heap.Init(h) // first time full: a heap from here on
					h.ordered = true
				}
				top := h.es[0]
				if !e.before(top) {
					w.setBound(e)
					return
				}
				heap.Pop(h)
				w.setBound(top)
			}
			if h.ordered {
				heap.Push(h, e)
			} else {
				h.Push(e)
			}
		case kindDelivered, kindCancelled:
			if i, ok := h.pos[e.id]; ok {
				h.remove(i)
			}
		case kindMoving:
			if i, ok := h.pos[e.id]; ok && (h.es[i].hwm < 0 || e.hwm < h.es[i].hwm) {
				h.es[i].hwm = e.hwm
			}
		case kindDropped:
			h.es = slices.DeleteFunc(h.es, func(x entry) bool { return x.topic == e.topic })
			clear(h.pos)
			for i, x := range h.es {
				h.pos[x.id] = i
			}
			if h.ordered {
				heap.Init(h)
			}
		}
	})
	if err != nil {
		return w, err
	}
	w.end = end
	for _, e := range h.es {
		if !w.more || e.before(w.bound) {
			w.pending = append(w.pending, e)
		}
	}
	slices.SortFunc(w.pending, func(a, b entry) int {
		switch {
		case a.before(b):
			return -1
		case b.before(a):
			return 1
		}
		return 0
	})
	return w, nil
}

func (w *window) setBound(e entry) {
	if !w.more || e.before(w.bound) {
		w.more, w.bound = true, entry{at: e.at, off: e.off}
	}
}

// findEntry reports whether id is a pending entry of topic in f, and that
// entry (with its lowest moving record's high watermark, -1 for none).
// Memory: one record at a time.
func findEntry(f vfs.File, size int64, topic, id string) (entry, bool, error) {
	var found entry
	ok := false
	_, err := walkFile(f, size, func(kind byte, e entry) {
		switch {
		case kind == kindScheduled && e.id == id && e.topic == topic:
			found, ok = e, true
			found.hwm = -1
		case !ok:
		case (kind == kindDelivered || kind == kindCancelled) && e.id == id,
			kind == kindDropped && e.topic == topic:
			ok = false
		case kind == kindMoving && e.id == id && (found.hwm < 0 || e.hwm < found.hwm):
			found.hwm = e.hwm
		}
	})
	return found, ok, err
}

// entryHeap is a max-heap of entries (the latest on top) with an index
// of each id's place. Until it is first full it is only a slice (ordered
// false): most windows never fill, and keeping heap order costs a map
// write per swap.
type entryHeap struct {
	es      []entry
	pos     map[string]int
	ordered bool
}

// remove removes the entry at i, keeping heap order once ordered.
func (h *entryHeap) remove(i int) {
	if h.ordered {
		heap.Remove(h, i)
		return
	}
	last := len(h.es) - 1
	h.Swap(i, last)
	h.Pop()
}

func (h *entryHeap) Len() int           { return len(h.es) }
func (h *entryHeap) Less(i, j int) bool { return h.es[j].before(h.es[i]) }
func (h *entryHeap) Swap(i, j int) {
	h.es[i], h.es[j] = h.es[j], h.es[i]
	h.pos[h.es[i].id], h.pos[h.es[j].id] = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(entry)
	h.pos[e.id] = len(h.es)
	h.es = append(h.es, e)
}
func (h *entryHeap) Pop() any {
	e := h.es[len(h.es)-1]
	h.es = h.es[:len(h.es)-1]
	delete(h.pos, e.id)
	return e
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
