package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/dispatcher"
)

// flagsNotYet are the keys of dispatcher.Settings that create and update
// do not take as flags yet (--file takes them); a key added to Settings
// fails TestSpecFlagsCoverSettings until it has a flag or is listed here.
var flagsNotYet = []string{"tls.ca-file", "tls.cert-file", "tls.key-file", "tls.server-name", "tls.insecure-skip-verify"}

// Every key of dispatcher.Settings has a flag of its name (nested keys
// joined by "-", lists singular: --pattern, --signing-secret, --signing-key, --header).
func TestSpecFlagsCoverSettings(t *testing.T) {
	singular := map[string]string{"patterns": "pattern", "signing-secrets": "signing-secret", "signing-keys": "signing-key", "headers": "header"}
	for _, key := range dispatcher.SettingsKeys() {
		if slices.Contains(flagsNotYet, key) {
			continue
		}
		name := strings.ReplaceAll(key, ".", "-")
		if s, ok := singular[name]; ok {
			name = s
		}
		if !slices.Contains(specFlagNames, name) {
			t.Errorf("dispatcher key %s has no flag --%s in specFlagNames", key, name)
		}
	}
}
