package app_test

import (
	"slices"
	"strings"
	"testing"
)

// The import rules of the tree, as a test (go list): the layers the docs
// describe hold because this test fails when one is broken. They concern
// the packages' own (non-test) imports: tests may build a real local log
// as a fixture anywhere.
//
//  1. modules/contract imports nothing of ours: it is the vocabulary every
//     module and plugin shares.
//  2. modules/storage (the local engine) imports only contract and its own
//     subpackages (vfs): it is one implementation of the seam, not a user
//     of the rest of the broker.
//  3. No module (modules/...) imports a plugin, the composition root or an
//     example (plugins/..., app/..., examples/...): plugins are optional.
//  4. Nothing above the storage seam imports modules/storage: the
//     dispatchers, consumer groups, HTTP API, line protocol, status page,
//     dedup, retention and the JetStream backend use contract's Log,
//     Checkpoint, errors and capabilities. Below the seam are storage
//     itself and modules/topicqueue (the registry, whose LocalBackend opens
//     the local engine, and its test helpers); storageUsers are the
//     exceptions above it.
const modulePath = "github.com/mmmq/mmmq"

// storageUsers are the packages above the seam allowed to import
// modules/storage, and why.
var storageUsers = map[string]string{
	"app":             "the composition root: it wires storage.Module into the default module set",
	"app/cli":         "the operator commands: verify and dump read the files offline, config check sizes the segment cache",
	"plugins/metrics": "the metrics observer: fsync latency, file kinds, the disk guard and the segment cache are the local engine's",
}

// importExemptions are import edges that break a rule today and are on
// their way out, each with where it goes: importer → imported. None
// today (the last ones, modules → plugins/webhooks and storage → config,
// are gone); the test fails on an entry that is no longer needed.
var importExemptions = map[[2]string]string{}

// importGraph returns the packages of this module, by path relative to
// the module root ("modules/storage"), with their own imports of this
// module, relative too.
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	for _, p := range listPackages(t, "./...") {
		pkgs[p.Path] = p.Imports
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages of %s; want the whole tree", len(pkgs), modulePath)
	}
	return pkgs
}

// relPath is path relative to the module root, and whether it is ours.
func relPath(path string) (string, bool) {
	if path == modulePath {
		return ".", true
	}
	rel, ok := strings.CutPrefix(path, modulePath+"/")
	return rel, ok
}

// under reports whether pkg is dir or below it.
func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

// importViolations applies the rules above to pkgs (path → imports of this
// module, relative paths) and returns one line per broken rule.
func importViolations(pkgs map[string][]string) []string {
	var bad []string
	for pkg, imports := range pkgs {
		for _, imp := range imports {
			if _, ok := importExemptions[[2]string{pkg, imp}]; ok {
				continue
			}
			switch {
			case under(pkg, "modules/contract") && !under(imp, "modules/contract"):
				bad = append(bad, pkg+" imports "+imp+": modules/contract imports nothing of ours")
			case under(pkg, "modules/storage") && !under(imp, "modules/storage") && imp != "modules/contract":
				bad = append(bad, pkg+" imports "+imp+": modules/storage imports only modules/contract and its own subpackages")
			case under(pkg, "modules") && (under(imp, "plugins") || under(imp, "app") || under(imp, "examples")):
				bad = append(bad, pkg+" imports "+imp+": a module imports no plugin, app or example")
			case imp == "modules/storage" && !under(pkg, "modules/storage") && !under(pkg, "modules/topicqueue"):
				if _, ok := storageUsers[pkg]; !ok {
					bad = append(bad, pkg+" imports modules/storage: above the storage seam only the packages in storageUsers may (use modules/contract)")
				}
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// TestImportRules holds the import rules of the tree (see the comment on
// modulePath).
func TestImportRules(t *testing.T) {
	pkgs := importGraph(t)
	for _, bad := range importViolations(pkgs) {
		t.Error(bad)
	}
	// The exceptions must still be needed, so that the lists shrink when
	// an import goes.
	for pkg, why := range storageUsers {
		if !slices.Contains(pkgs[pkg], "modules/storage") {
			t.Errorf("storageUsers lists %s (%s), which no longer imports modules/storage: remove it", pkg, why)
		}
	}
	for edge, why := range importExemptions {
		if !slices.Contains(pkgs[edge[0]], edge[1]) {
			t.Errorf("importExemptions lists %s → %s (%s), which is gone: remove it", edge[0], edge[1], why)
		}
	}
}

// TestImportRulesCatchViolations is the negative control: every rule
// reports an edge that breaks it.
func TestImportRulesCatchViolations(t *testing.T) {
	pkgs := map[string][]string{
		"modules/contract":   {"modules/config"},
		"modules/storage":    {"modules/contract", "modules/storage/vfs", "modules/topicqueue"},
		"modules/groups":     {"plugins/lineproto", "modules/storage"},
		"plugins/jetstream":  {"modules/storage"},
		"modules/topicqueue": {"modules/storage"},
		"plugins/metrics":    {"modules/storage"},
	}
	want := []string{
		"modules/contract imports modules/config: modules/contract imports nothing of ours",
		"modules/groups imports modules/storage: above the storage seam only the packages in storageUsers may (use modules/contract)",
		"modules/groups imports plugins/lineproto: a module imports no plugin, app or example",
		"modules/storage imports modules/topicqueue: modules/storage imports only modules/contract and its own subpackages",
		"plugins/jetstream imports modules/storage: above the storage seam only the packages in storageUsers may (use modules/contract)",
	}
	if got := importViolations(pkgs); !slices.Equal(got, want) {
		t.Errorf("importViolations =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
