package jetstream

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"

	"github.com/mmmq/mmmq/modules/contract"
)

// The JetStream API errors and client errors map to the broker's codes.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code string
	}{
		{&apiError{Code: 400, ErrCode: codeMessageTooLarge}, contract.CodeTooLarge},
		{&apiError{Code: 400, ErrCode: codeBatchTooLarge}, contract.CodeTooLarge},
		{&apiError{Code: 429, ErrCode: codeBatchesInflight}, contract.CodeOverloaded},
		{&apiError{Code: 503, ErrCode: codeInsufficientResource}, contract.CodeNoSpace},
		{&apiError{Code: 400, ErrCode: codeAccountResources}, contract.CodeNoSpace},
		{&apiError{Code: 500, ErrCode: 10176}, contract.CodeUnavailable},
		{&apiError{Code: 409, ErrCode: codeDuplicateInProcess, Description: "duplicate message id is in process"}, contract.CodeTimeout},
		{nats.ErrMaxPayload, contract.CodeTooLarge},
		{nats.ErrTimeout, contract.CodeTimeout},
		{context.DeadlineExceeded, contract.CodeTimeout},
		{jetstream.ErrAsyncPublishTimeout, contract.CodeTimeout},
		{nats.ErrNoResponders, contract.CodeUnavailable},
		{nats.ErrReconnectBufExceeded, contract.CodeUnavailable},
		{errors.New("other"), contract.CodeUnavailable},
	} {
		assert.Equal(t, tc.code, contract.Classify(classify(tc.err)).Code, tc.err.Error())
	}
	// NATS's words for an id being stored through another broker never
	// reach a producer.
	in := classify(&apiError{Code: 409, ErrCode: codeDuplicateInProcess, Description: "duplicate message id is in process"})
	assert.NotContains(t, in.Error(), "in process")
	assert.True(t, inProcess(in))
}
