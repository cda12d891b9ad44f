package httpapi

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
)

// A full disk is 507 whether it fails a write of an open log (ErrNoSpace)
// or the creation of a new topic's files (a bare ENOSPC).
func TestClassifyNoSpace(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("create segment x: %w", &os.PathError{Op: "open", Path: "x", Err: syscall.ENOSPC}),
		fmt.Errorf("append: %w", storage.ErrNoSpace),
	} {
		if c := contract.Classify(err); c.Status != 507 || c.Code != contract.CodeNoSpace {
			t.Errorf("Classify(%v) = %d %s, want 507 %s", err, c.Status, c.Code, contract.CodeNoSpace)
		}
	}
}
