package httpapi

import (
	"testing"

	"go.uber.org/goleak"
)

// The server starts goroutines (the listener, connection handlers, the
// refused-body drains, long polls): none may outlive a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
