package contract

import (
	"io"
	"net/http"
	"strconv"
	"sync"
)

// streamBufBytes is the buffer of a JSONStream: pieces shorter than
// streamDirectBytes are gathered in it, so a reply of many small messages
// is written in few calls.
const (
	streamBufBytes    = 16 << 10
	streamDirectBytes = 4 << 10
)

var streamBufs = sync.Pool{New: func() any { b := make([]byte, 0, streamBufBytes); return &b }}

// JSONStream writes one JSON document to an io.Writer in pieces, without
// building it in memory: short pieces go through a pooled 16 KiB buffer,
// and a raw value of 4 KiB or more (a stored message) is written straight
// from the caller's slice. A reply of n bytes of messages thus allocates no
// copy of them, where encoding/json builds the whole document (growing its
// buffer by doubling, up to 4× the reply in allocations) before writing it.
//
// The caller writes the document's structure itself ("{", member names,
// ","), so it is for the few hand-written replies on hot or large paths
// (fetch, read-back). The first write error is kept and ends the writing
// (see Err); Close flushes and returns the buffer to the pool.
type JSONStream struct {
	w   io.Writer
	bp  *[]byte
	err error
}

// NewJSONStream returns a stream writing to w. Call Close when done.
func NewJSONStream(w io.Writer) *JSONStream {
	bp := streamBufs.Get().(*[]byte)
	*bp = (*bp)[:0]
	return &JSONStream{w: w, bp: bp}
}

// StartJSON sets Content-Type application/json and status on w and returns
// a stream over it: the body of a hand-written JSON reply.
func StartJSON(w http.ResponseWriter, status int) *JSONStream {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return NewJSONStream(w)
}

// Raw writes b, which must already be JSON text (or a piece of it).
func (s *JSONStream) Raw(b []byte) {
	if s.err != nil {
		return
	}
	if len(b) >= streamDirectBytes {
		s.flush()
		if s.err == nil {
			_, s.err = s.w.Write(b)
		}
		return
	}
	if len(*s.bp)+len(b) > streamBufBytes {
		s.flush()
	}
	*s.bp = append(*s.bp, b...)
}

// Text writes t, which must already be JSON text, like Raw.
func (s *JSONStream) Text(t string) {
	if s.err != nil {
		return
	}
	if len(*s.bp)+len(t) > streamBufBytes {
		s.flush()
	}
	if len(t) >= streamBufBytes {
		_, s.err = io.WriteString(s.w, t)
		return
	}
	*s.bp = append(*s.bp, t...)
}

// String writes v as a quoted, escaped JSON string.
func (s *JSONStream) String(v string) {
	if s.err != nil {
		return
	}
	if len(*s.bp)+len(v)+2 > streamBufBytes {
		s.flush()
	}
	*s.bp = AppendJSONString(*s.bp, v)
}

// Int writes n as a JSON number.
func (s *JSONStream) Int(n int64) {
	if s.err != nil {
		return
	}
	if len(*s.bp)+20 > streamBufBytes {
		s.flush()
	}
	*s.bp = strconv.AppendInt(*s.bp, n, 10)
}

func (s *JSONStream) flush() {
	if s.err == nil && len(*s.bp) > 0 {
		_, s.err = s.w.Write(*s.bp)
	}
	*s.bp = (*s.bp)[:0]
}

// Err is the first write error, or nil.
func (s *JSONStream) Err() error { return s.err }

// Close writes what is buffered, returns the buffer to the pool and
// returns the first write error. The stream must not be used after.
func (s *JSONStream) Close() error {
	s.flush()
	if cap(*s.bp) <= 2*streamBufBytes {
		streamBufs.Put(s.bp)
	}
	s.bp = nil
	return s.err
}
