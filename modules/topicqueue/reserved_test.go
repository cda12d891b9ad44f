package topicqueue

import (
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
)

// The broker's own directories are passed over silently; an unknown one
// is not.
func TestReservedDir(t *testing.T) {
	for name, want := range map[string]bool{
		contract.ScheduledDir:                       true,
		storage.DeletingPrefix + "0123456789abcdef": true,
		".other":   false,
		"bad name": false,
	} {
		if got := reservedDir(name); got != want {
			t.Errorf("reservedDir(%q) = %v, want %v", name, got, want)
		}
	}
}
