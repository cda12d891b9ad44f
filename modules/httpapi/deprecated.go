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
//
// Deprecated: use the contract.Code constants.
const (
	CodeBadRequest    = contract.CodeBadRequest
	CodeTooLarge      = contract.CodeTooLarge
	CodeUnavailable   = contract.CodeUnavailable
	CodeNoSpace       = contract.CodeNoSpace
	CodeNotFound      = contract.CodeNotFound
	CodeMethod        = contract.CodeMethod
	CodeTooManyTopics = contract.CodeTooManyTopics
	CodeTimeout       = contract.CodeTimeout
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
