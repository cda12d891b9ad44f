package app_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The repository's docs stand alone: no source file, README or
// configuration comment points at documents that are not in the repository
// (the design contract, the two source documents, the issue tracker), and
// every quote is in English (no untranslated Korean or Chinese).
func TestDocsAreSelfContained(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "*.go", "*.md", "*.yaml", "*.sh", "Makefile").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	outside := regexp.MustCompile(`DESIGN\.md|DESIGN[ ]§|(?i:\bseed[ ]00[0-9])|\bissues? [0-9]+\b`)
	foreign := regexp.MustCompile(`[\x{AC00}-\x{D7A3}\x{3040}-\x{30FF}\x{4E00}-\x{9FFF}]`)
	files := strings.Fields(string(out))
	if len(files) < 50 {
		t.Fatalf("only %d files listed; is this the repository?", len(files))
	}
	for _, f := range files {
		if f == "app/docs_test.go" {
			continue // this file names what it looks for
		}
		b, err := os.ReadFile("../" + f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d points outside the repository (%q): %s", f, i+1, m, strings.TrimSpace(line))
			}
			if m := foreign.FindString(line); m != "" {
				t.Errorf("%s:%d has an untranslated quote (%q): %s", f, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}

// frontDoorMaxLines is the longest the top-level README may grow: it is the
// front door (what mmmq is, the two commands, a quickstart, the folder map,
// the guarantees in short); the reference lives in the README.md beside the
// code it describes.
const frontDoorMaxLines = 300

// TestReadmeIsAFrontDoor: README.md stays at most frontDoorMaxLines lines.
func TestReadmeIsAFrontDoor(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > frontDoorMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move reference text into the README.md of the folder it describes", n, frontDoorMaxLines)
	}
}

// goPackage is one package of `go list`: its import path relative to the
// module (modules/storage), its directory, its package comment and its own
// (non-test) imports of this module, relative too.
type goPackage struct {
	Path, Dir, Doc string
	Imports        []string
}

// listPackages runs `go list -json` in the repository root (go test puts
// its own toolchain first on PATH) and returns the packages of this module
// matching patterns (with -deps: those they depend on), paths relative to
// the module path.
func listPackages(t *testing.T, patterns ...string) []goPackage {
	t.Helper()
	args := append([]string{"list", "-json=ImportPath,Dir,Doc,Imports"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath, Dir, Doc string
			Imports              []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		rel, ours := relPath(p.ImportPath)
		if !ours {
			continue
		}
		g := goPackage{Path: rel, Dir: p.Dir, Doc: p.Doc}
		for _, imp := range p.Imports {
			if r, ok := relPath(imp); ok {
				g.Imports = append(g.Imports, r)
			}
		}
		pkgs = append(pkgs, g)
	}
	return pkgs
}

// folderMap returns the module and plugin folders the README's folder map
// names (`modules/x`, `plugins/y/z`, in backquotes), from its "## Folder
// map" section.
func folderMap(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	start := strings.Index(md, "\n## Folder map\n")
	if start < 0 {
		t.Fatal(`README.md has no "## Folder map" section`)
	}
	section := md[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("`((?:modules|plugins)/[A-Za-z0-9_./-]+?)/?`").FindAllStringSubmatch(section, -1) {
		listed[m[1]] = true
	}
	return listed
}

// TestReadmeFolderMapListsEveryPackage: the README's folder map names
// exactly the packages under modules/ and plugins/. A package the stock
// binary does not link (a test helper: vfstest, httpapitest, tlstest,
// topicqueuetest, jstest, jscluster) may be left to its parent's line.
func TestReadmeFolderMapListsEveryPackage(t *testing.T) {
	pkgs := listPackages(t, "./modules/...", "./plugins/...")
	linked := map[string]bool{}
	for _, p := range listPackages(t, "-deps", "./app/mmmq") {
		linked[p.Path] = true
	}
	listed := folderMap(t)
	known := map[string]bool{}
	for _, p := range pkgs {
		known[p.Path] = true
		if listed[p.Path] {
			continue
		}
		if !linked[p.Path] && listed[path.Dir(p.Path)] {
			continue // a test helper, on its parent's line
		}
		t.Errorf("README.md's folder map does not list %s", p.Path)
	}
	for l := range listed {
		if !known[l] {
			t.Errorf("README.md's folder map lists %s, which is not a package of ./modules/... or ./plugins/...", l)
		}
	}
}

// TestPackageFoldersAreDocumented: every package under modules/ and
// plugins/ has a README.md beside its code or a package comment.
func TestPackageFoldersAreDocumented(t *testing.T) {
	for _, p := range listPackages(t, "./modules/...", "./plugins/...") {
		if strings.TrimSpace(p.Doc) != "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(p.Dir, "README.md")); err != nil {
			t.Errorf("%s has neither a README.md nor a package comment (doc.go)", p.Path)
		}
	}
}

// markdownFiles lists the repository's Markdown files, committed or not
// (untracked ones too, unless ignored), relative to the repository root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", "..", "ls-files", "--cached", "--others", "--exclude-standard", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Fields(string(out)) {
		if _, err := os.Stat(filepath.Join("..", f)); err == nil { // not deleted in the work tree
			files = append(files, f)
		}
	}
	if len(files) < 5 {
		t.Fatalf("only %d Markdown files listed; is this the repository?", len(files))
	}
	return files
}

var (
	mdFence     = regexp.MustCompile("^\\s*(```|~~~)")
	mdCodeSpan  = regexp.MustCompile("`+[^`]*`+")
	mdLink      = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	mdRefDef    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	mdHeading   = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	mdInlineURL = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	mdScheme    = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// markdownLines returns the lines of a Markdown file outside fenced code
// blocks, with code spans blanked out, numbered from 1.
func markdownLines(md string) map[int]string {
	lines := map[int]string{}
	inFence := false
	for i, l := range strings.Split(md, "\n") {
		if mdFence.MatchString(l) {
			inFence = !inFence
			continue
		}
		if !inFence {
			lines[i+1] = mdCodeSpan.ReplaceAllString(l, "``")
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives a Markdown file's
// headings: lower case, punctuation but '-' and '_' dropped, spaces made
// '-', a repeated anchor suffixed -1, -2, ...
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, l := range strings.Split(md, "\n") {
		if mdFence.MatchString(l) {
			inFence = !inFence
			continue
		}
		m := mdHeading.FindStringSubmatch(l)
		if inFence || m == nil {
			continue
		}
		text := mdInlineURL.ReplaceAllString(m[2], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}

// TestMarkdownLinksResolve: every relative link of every Markdown file of
// the repository names a file or folder that exists, and a #anchor into a
// Markdown file names one of its headings.
func TestMarkdownLinksResolve(t *testing.T) {
	anchorsOf := map[string]map[string]bool{}
	anchors := func(file string) map[string]bool {
		if a, ok := anchorsOf[file]; ok {
			return a
		}
		b, err := os.ReadFile(filepath.Join("..", file))
		if err != nil {
			t.Fatal(err)
		}
		anchorsOf[file] = headingAnchors(string(b))
		return anchorsOf[file]
	}
	checked := 0
	for _, f := range markdownFiles(t) {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		lines := markdownLines(string(b))
		for n, l := range lines {
			var targets []string
			// A link's text may wrap onto the next line: look at this line
			// and the next, and take the links that start on this one.
			joined := l + " " + lines[n+1]
			for _, m := range mdLink.FindAllStringSubmatchIndex(joined, -1) {
				if m[0] < len(l) {
					targets = append(targets, joined[m[2]:m[3]])
				}
			}
			if m := mdRefDef.FindStringSubmatch(l); m != nil {
				targets = append(targets, m[1])
			}
			for _, target := range targets {
				if mdScheme.MatchString(target) {
					continue // https:, mailto:, ...
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				dest := f
				if file != "" {
					dest = path.Clean(path.Join(path.Dir(f), file))
					if dest == ".." || strings.HasPrefix(dest, "../") || path.IsAbs(file) {
						t.Errorf("%s:%d: link %q leaves the repository", f, n, target)
						continue
					}
					if _, err := os.Stat(filepath.Join("..", dest)); err != nil {
						t.Errorf("%s:%d: link %q: %s does not exist", f, n, target, dest)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(dest, ".md") && !anchors(dest)[anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", f, n, target, dest, anchor)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d relative links checked; is the link pattern still right?", checked)
	}
}

// TestErrorTableDocumentsEveryCode: every code of modules/contract's error
// table has a row in the HTTP API's "## Errors" table.
func TestErrorTableDocumentsEveryCode(t *testing.T) {
	src, err := os.ReadFile("../modules/contract/errors.go")
	if err != nil {
		t.Fatal(err)
	}
	codes := regexp.MustCompile(`(?m)^\s*Code\w+\s*=\s*"([A-Z_]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(codes) < 10 {
		t.Fatalf("only %d codes found in modules/contract/errors.go; is the pattern still right?", len(codes))
	}
	b, err := os.ReadFile("../modules/httpapi/README.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	start := strings.Index(md, "\n## Errors\n")
	if start < 0 {
		t.Fatal(`modules/httpapi/README.md has no "## Errors" section`)
	}
	section := md[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	for _, c := range codes {
		if !strings.Contains(section, "| `"+c[1]+"` |") {
			t.Errorf("modules/httpapi/README.md's error table has no row for %s", c[1])
		}
	}
}
