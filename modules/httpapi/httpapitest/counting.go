// Package httpapitest holds test doubles for code that serves HTTP through
// the broker's handlers.
package httpapitest

import "net/http"

// CountingWriter is an http.ResponseWriter that keeps only the status, the
// headers and the byte count of what was written (and the body itself when
// Keep is set), so that a test measuring a handler's allocations measures
// the handler's, not a recorder's growing buffer.
type CountingWriter struct {
	Status int  // first status written; 200 once the body starts without one
	N      int  // body bytes written
	Keep   bool // keep the body in Body
	Body   []byte
	h      http.Header
}

// Header returns the response headers.
func (w *CountingWriter) Header() http.Header {
	if w.h == nil {
		w.h = http.Header{}
	}
	return w.h
}

// WriteHeader records the first status.
func (w *CountingWriter) WriteHeader(status int) {
	if w.Status == 0 {
		w.Status = status
	}
}

// Write counts p (and keeps it when Keep is set).
func (w *CountingWriter) Write(p []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	w.N += len(p)
	if w.Keep {
		w.Body = append(w.Body, p...)
	}
	return len(p), nil
}
