package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestOneWayToWriteFiles holds docs/ARCHITECTURE.md's "one way" claims to
// the code: only internal/parquetfile opens a Parquet writer, and only
// internal/atomicfile replaces a file through a temporary file and a rename
// (a private copy is how rollout/cache.go came to skip the fsync). The
// exceptions are the ones ARCHITECTURE.md names, with its reasons.
func TestOneWayToWriteFiles(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// Files that may rename a temporary file of their own: the BM25 indexes
	// stream a file of up to gigabytes through their own section writer and
	// sync it themselves (see ARCHITECTURE.md, internal/atomicfile's row).
	renameAllowed := []string{"retrieval/indexio.go", "retrieval/diskbuild.go"}
	parquetWriters := map[string][]string{
		"github.com/apache/arrow-go/v18/parquet/pqarrow": {"NewFileWriter"},
		"github.com/apache/arrow-go/v18/parquet/file":    {"NewParquetWriter"},
	}
	fset := token.NewFileSet()
	files := 0
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
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		imports := map[string]string{} // local name → import path
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			name := p[strings.LastIndex(p, "/")+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			imports[name] = p
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			var createsTemp, renames bool
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, ok := sel.X.(*ast.Ident)
				if !ok {
					return true
				}
				p := imports[pkg.Name]
				if slices.Contains(parquetWriters[p], sel.Sel.Name) && !strings.HasPrefix(rel, "internal/parquetfile/") {
					t.Errorf("%s: %s opens a Parquet writer (%s.%s): write through internal/parquetfile", rel, fn.Name.Name, pkg.Name, sel.Sel.Name)
				}
				if p == "os" {
					createsTemp = createsTemp || sel.Sel.Name == "CreateTemp"
					renames = renames || sel.Sel.Name == "Rename"
				}
				return true
			})
			if createsTemp && renames && !strings.HasPrefix(rel, "internal/atomicfile/") && !slices.Contains(renameAllowed, rel) {
				t.Errorf("%s: %s renames a temporary file of its own: write through internal/atomicfile (it syncs the file and its directory)", rel, fn.Name.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("checked %d Go files under %s, want the whole module", files, root)
	}
}
