package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"syscall"

	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// ErrorBody is the JSON body of every error response (DESIGN §2): a NACK
// with a human-readable error and a stable machine-readable code.
type ErrorBody struct {
	Acknowledgement string `json:"acknowledgement"` // always "NACK"
	Error           string `json:"error"`
	Code            string `json:"code"`
}

// Error codes of ErrorBody.Code.
const (
	CodeBadRequest    = "BAD_REQUEST"
	CodeTooLarge      = "TOO_LARGE"
	CodeUnavailable   = "UNAVAILABLE"
	CodeNoSpace       = "NO_SPACE"
	CodeNotFound      = "NOT_FOUND"
	CodeMethod        = "METHOD_NOT_ALLOWED"
	CodeTooManyTopics = "TOO_MANY_TOPICS"
	CodeTimeout       = "TIMEOUT"
)

// WriteJSON writes v as JSON with status (no HTML escaping: error texts
// keep their '<', '>' and '&').
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// WriteError writes an error response with its status and code.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	WriteJSON(w, status, ErrorBody{Acknowledgement: "NACK", Error: msg, Code: code})
}

// classify maps an error of the publish path to its HTTP status and code
// (DESIGN §2): 400 bad input, 413 too large, 503 storage unavailable (write
// or fsync failure, shutting down, queue full), 507 disk full.
func classify(err error) (int, string) {
	var ie *inputError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ie):
		switch ie.status {
		case http.StatusRequestEntityTooLarge:
			return ie.status, CodeTooLarge
		case http.StatusRequestTimeout:
			return ie.status, CodeTimeout
		}
		return ie.status, CodeBadRequest
	case errors.As(err, &mbe), errors.Is(err, storage.ErrRecordTooLarge):
		return http.StatusRequestEntityTooLarge, CodeTooLarge
	case errors.Is(err, topicqueue.ErrInvalidName), errors.Is(err, storage.ErrEmptyRecord):
		return http.StatusBadRequest, CodeBadRequest
	case errors.Is(err, storage.ErrNoSpace), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		// ENOSPC also reaches here unwrapped when a new topic's files
		// cannot be created.
		return http.StatusInsufficientStorage, CodeNoSpace
	case errors.Is(err, topicqueue.ErrTooManyTopics):
		return http.StatusServiceUnavailable, CodeTooManyTopics
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, CodeTimeout
	}
	return http.StatusServiceUnavailable, CodeUnavailable
}
