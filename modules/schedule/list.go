package schedule

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Cursor is a place in a topic's listing of pending scheduled messages
// (List): the due time of an entry, its bucket and where its scheduled
// record starts in the bucket's file. Records never move in their file
// (append only; only a torn tail, never acknowledged, is ever cut), so a
// cursor stays valid while entries are moved or cancelled, and after a
// restart. The listing is ordered by (At, Bucket, Off).
type Cursor struct {
	At, Bucket, Off int64
}

// String is the cursor's token: "<at>.<bucket>.<off>", opaque to clients.
func (c Cursor) String() string {
	return strconv.FormatInt(c.At, 10) + "." + strconv.FormatInt(c.Bucket, 10) + "." + strconv.FormatInt(c.Off, 10)
}

// ParseCursor is Cursor.String's inverse.
func ParseCursor(s string) (Cursor, error) {
	p := strings.Split(s, ".")
	if len(p) != 3 {
		return Cursor{}, fmt.Errorf("not a cursor of this listing (give the \"next\" of the previous page)")
	}
	var n [3]int64
	for i, x := range p {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil || v < 0 || strconv.FormatInt(v, 10) != x {
			return Cursor{}, fmt.Errorf("not a cursor of this listing (give the \"next\" of the previous page)")
		}
		n[i] = v
	}
	return Cursor{At: n[0], Bucket: n[1], Off: n[2]}, nil
}

func (c Cursor) before(o Cursor) bool {
	switch {
	case c.At != o.At:
		return c.At < o.At
	case c.Bucket != o.Bucket:
		return c.Bucket < o.Bucket
	}
	return c.Off < o.Off
}

// Listed is one pending scheduled message of a listing.
type Listed struct {
	ScheduleID string
	DeliverAt  int64 // Unix ms
	// ID, Key, Headers: the stored message's; Size: its content's
	// length in bytes (the JSON value as stored).
	ID      string
	Key     string
	Headers map[string]string
	Size    int
	// Content is the stored content (JSON), only when asked for.
	Content json.RawMessage
	at      Cursor
	n       int // the record's length, header included
}

// ListPage is a page of List.
type ListPage struct {
	Items []Listed
	// Pending is the topic's pending scheduled messages (every page).
	Pending int
	// Next continues the listing; nil when this is the last page.
	Next *Cursor
}

// ListOptions are a listing's page: at most Limit items after After (nil:
// from the start), with their content when Content is set (then at most
// MaxBytes of content, at least one item).
type ListOptions struct {
	After    *Cursor
	Limit    int
	Content  bool
	MaxBytes int
}

// listScanMin is the fewest entries one scan of a bucket file keeps (see
// List): a scan keeps the earliest entries it sees, and those later
// cancelled or delivered in the same file leave it short.
const listScanMin = 4096

// List returns a page of topic's pending scheduled messages in due-time
// order (then bucket, then place in the file): the entries after
// o.After. Entries not yet acknowledged (their record not yet fsynced)
// are left out.
//
// The scheduler's mutex is held only to copy which buckets hold entries
// of topic (perFile) and their sizes, and to leave out entries not yet
// fsynced: the files are read without it (their records up to the copied
// size never change). Only buckets holding entries of topic are read,
// from the first whose entries may follow the cursor, until the page is
// full and the next bucket starts after its last entry. Memory: at most
// max(o.Limit+1, 4096) entries per scan and one record at a time (plus
// the content asked for), whatever the number pending.
//
// Concurrent moves and cancels: an entry pending at both pages' reads
// is in exactly one page (the cursor is a place, not an entry, so the
// entry it names may be gone); one scheduled meanwhile before the cursor
// is not listed by later pages.
func (s *Scheduler) List(topic string, o ListOptions) (ListPage, error) {
	if o.Limit <= 0 {
		o.Limit = 100
	}
	type bucket struct{ start, size int64 }
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return ListPage{}, err
	}
	page := ListPage{Pending: s.pending[topic]}
	var bs []bucket
	for b, m := range s.perFile {
		if m[topic] <= 0 {
			continue
		}
		if l, ok := s.lastAt[b]; ok && o.After != nil && l < o.After.At {
			continue // wholly before the cursor
		}
		bs = append(bs, bucket{b, s.sizes[b]})
	}
	s.mu.Unlock()
	slices.SortFunc(bs, func(a, b bucket) int { return cmp.Compare(a.start, b.start) })

	want := o.Limit + 1 // one more: is there a next page
	var got []Listed    // sorted, at most want
	files := map[int64]vfs.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	keep := max(want, listScanMin)
	if s.opts.listKeep > 0 {
		keep = s.opts.listKeep
	}
	for _, b := range bs {
		if len(got) >= want && got[want-1].at.At < b.start {
			break // every entry of b (due at or after its start) comes later
		}
		f, err := s.opts.FS.Open(s.path(b.start))
		if vfs.IsNotExist(err) {
			continue // its entries are all done: removed
		}
		if err != nil {
			return ListPage{}, fmt.Errorf("schedule: open %s: %w", s.path(b.start), err)
		}
		files[b.start] = f
		lo := first
		if a := o.After; a != nil {
			switch {
			case b.start < a.Bucket:
				lo = entry{at: a.At, off: math.MaxInt64}
			case b.start == a.Bucket:
				lo = entry{at: a.At, off: a.Off + 1}
			default:
				lo = entry{at: a.At, off: -1}
			}
		}
		n := 0
		for {
			w, err := scanWindow(f, b.size, lo, keep, func(e entry) bool { return e.topic != topic })
			if err != nil {
				return ListPage{}, fmt.Errorf("schedule: scan %s: %w", s.path(b.start), err)
			}
			w.pending = s.acknowledged(w.pending)
			for _, e := range w.pending {
				got = append(got, Listed{ScheduleID: e.id, DeliverAt: e.at, at: Cursor{At: e.at, Bucket: b.start, Off: e.off}, n: e.n})
			}
			n += len(w.pending)
			if !w.more {
				break
			}
			if n >= want {
				// Those left out of this file (at or after the bound)
				// all follow the want entries taken from it: not needed.
				break
			}
			lo = w.bound
		}
		slices.SortFunc(got, func(a, b Listed) int {
			if a.at.before(b.at) {
				return -1
			}
			return 1
		})
		if len(got) > want {
			got = slices.Clip(got[:want])
		}
	}
	more := len(got) > o.Limit
	if len(got) > o.Limit {
		got = got[:o.Limit]
	}
	bytes := 0
	for i := range got {
		l := &got[i]
		if err := s.readListed(files[l.at.Bucket], l, o.Content); err != nil {
			return ListPage{}, err
		}
		if o.Content {
			bytes += len(l.Content)
			if bytes > o.MaxBytes && i > 0 && o.MaxBytes > 0 {
				got, more = got[:i], true
				break
			}
		}
	}
	page.Items = got
	if more && len(got) > 0 {
		c := got[len(got)-1].at
		page.Next = &c
	}
	return page, nil
}

// acknowledged leaves out of es the entries whose scheduled record is not
// yet fsynced.
func (s *Scheduler) acknowledged(es []entry) []entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.DeleteFunc(es, func(e entry) bool { return s.unsynced[e.id] })
}

// readListed reads l's record from f and fills in the stored message's
// id, key, headers and content size (and content).
func (s *Scheduler) readListed(f vfs.File, l *Listed, content bool) error {
	msg, err := readMessage(f, entry{off: l.at.Off, n: l.n})
	if err != nil {
		return fmt.Errorf("schedule: read the scheduled message %s: %w", l.ScheduleID, err)
	}
	var m struct {
		ID      string            `json:"id"`
		Key     string            `json:"key"`
		Headers map[string]string `json:"headers"`
		Content json.RawMessage   `json:"content"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		return fmt.Errorf("schedule: the scheduled message %s is not a stored message: %w", l.ScheduleID, err)
	}
	l.ID, l.Key, l.Headers, l.Size = m.ID, m.Key, m.Headers, len(m.Content)
	if content {
		l.Content = m.Content
	}
	return nil
}
