package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every relative link in the repository's Markdown must resolve to a file
// inside the repository: someone who cloned only this repository follows
// them (../shared is not there for them).
func TestMarkdownLinksStayInsideTheRepo(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)#\s]+)(?:#[^)]*)?\)`)
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "checkpoints" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			abs := filepath.Clean(filepath.Join(filepath.Dir(path), target))
			if !strings.HasPrefix(abs, root+string(filepath.Separator)) {
				t.Errorf("%s: link %q leaves the repository", rel, target)
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s: link %q does not resolve: %v", rel, target, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("only %d links checked: the walk missed the Markdown files", checked)
	}
}

// docs/ARCHITECTURE.md's package table names every Go package directory of
// the repository (a row covers the directories below it too), and every row
// names a directory that exists: the map must not drift from the code.
func TestArchitectureListsEveryPackage(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(raw), "## Packages, one job each")
	if !ok {
		t.Fatal("docs/ARCHITECTURE.md has no \"Packages, one job each\" section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	cell := regexp.MustCompile("`([^`]+)`")
	var rows []string
	for _, line := range strings.Split(table, "\n") {
		first, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		if !ok || !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, m := range cell.FindAllStringSubmatch(first, -1) {
			rows = append(rows, strings.TrimSuffix(m[1], "/"))
		}
	}
	if len(rows) < 10 {
		t.Fatalf("read only %d rows from the package table: %v", len(rows), rows)
	}
	for _, r := range rows {
		if st, err := os.Stat(filepath.Join(root, r)); err != nil || !st.IsDir() {
			t.Errorf("the package table names %s, which is not a directory of the repository", r)
		}
	}
	covered := func(dir string) bool {
		for _, r := range rows {
			if dir == r || strings.HasPrefix(dir, r+"/") {
				return true
			}
		}
		return false
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		if !covered(filepath.ToSlash(rel)) {
			t.Errorf("package directory %s is missing from docs/ARCHITECTURE.md's package table", rel)
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Imports point down only (docs/ARCHITECTURE.md, "Import direction"): a
// package imports only packages of a lower layer (or of its own tree, such
// as internal/* among themselves). A new arrow that runs back up fails here.
func TestImportsPointDown(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/himes-rl/himes/"
	layer := map[string]int{
		"internal": 1, "datasets": 2, "hser": 2, "analysis": 2, "rlcore": 2, "embedding": 3, "memory": 4, "retrieval": 5,
		"trainer": 6, "rollout": 6, "evaluate": 7, "grpo": 8, "report": 9, "configs": 9, "ablate": 10, "scripts": 10, "cmd": 11,
		"export": 2,
	}
	top := func(rel string) string { first, _, _ := strings.Cut(rel, "/"); return first }
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		from, ok := layer[top(rel)]
		if !ok {
			t.Errorf("%s: directory %s has no layer in this test", path, rel)
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			target, ok := strings.CutPrefix(strings.Trim(im.Path.Value, `"`), mod)
			if !ok {
				continue
			}
			checked++
			to := layer[top(target)]
			if top(rel) == top(target) {
				continue // within one tree (internal/*, a benchmark main under its package): Go refuses cycles
			}
			if to >= from {
				fpath, _ := filepath.Rel(root, path)
				t.Errorf("%s imports %s: an arrow from layer %d (%s) to layer %d", fpath, target, from, top(rel), to)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d imports", checked)
	}
}
