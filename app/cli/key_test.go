package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
)

// mmmq dump shows each message with the ordering key it was published
// with: the stored JSON as the publish path wrote it.
func TestDumpShowsTheKey(t *testing.T) {
	root := t.TempDir()
	l, err := storage.Open(filepath.Join(root, "t"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{`{"topic":"t","content":1,"key":"customer 7/é"}`, `{"topic":"t","content":2}`} {
		d, err := contract.DecodeMessage([]byte(req), time.UnixMilli(1), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(context.Background(), d.Stored, contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	code, out := capture(t, "dump", "--root", root, "--topic", "t")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("exit %d, output %q", code, out)
	}
	if !strings.Contains(lines[0], `,"key":"customer 7/é",`) || strings.Contains(lines[1], `"key"`) {
		t.Errorf("dump = %q, want the key on offset 0 only", out)
	}
}
