package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// ErrorBody is the JSON body of every error response.
//
// Deprecated: use contract.ErrorBody.
type ErrorBody = contract.ErrorBody

// Error codes of ErrorBody.Code.
const (
	// Deprecated: use contract.CodeBadRequest.
	CodeBadRequest = contract.CodeBadRequest
	// Deprecated: use contract.CodeTooLarge.
	CodeTooLarge = contract.CodeTooLarge
	// Deprecated: use contract.CodeUnavailable.
	CodeUnavailable = contract.CodeUnavailable
	// Deprecated: use contract.CodeNoSpace.
	CodeNoSpace = contract.CodeNoSpace
	// Deprecated: use contract.CodeNotFound.
	CodeNotFound = contract.CodeNotFound
	// Deprecated: use contract.CodeMethod.
	CodeMethod = contract.CodeMethod
	// Deprecated: use contract.CodeTooManyTopics.
	CodeTooManyTopics = contract.CodeTooManyTopics
	// Deprecated: use contract.CodeTimeout.
	CodeTimeout = contract.CodeTimeout
)

// WriteJSON writes v as JSON with status.
//
// Deprecated: use contract.WriteJSON.
func WriteJSON(w http.ResponseWriter, status int, v any) { contract.WriteJSON(w, status, v) }

// WriteError writes an error response with its status and code.
//
// Deprecated: use contract.WriteError.
func WriteError(w http.ResponseWriter, status int, code, msg string) {
	contract.WriteError(w, status, code, msg)
}

// PublishRequest is the body of POST /messages.
//
// Deprecated: use contract.PublishRequest.
type PublishRequest = contract.PublishRequest

// EncodeMessage returns the stored message JSON for topic and content.
//
// Deprecated: use contract.EncodeMessage.
func EncodeMessage(topic string, content json.RawMessage, id string, headers map[string]string, now time.Time) ([]byte, error) {
	return contract.EncodeMessage(topic, content, id, headers, now)
}
