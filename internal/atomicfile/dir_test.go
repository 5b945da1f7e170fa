package atomicfile

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// files maps the files under dir (relative paths) to their contents.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeTree(tree map[string]string) func(string) error {
	return func(dir string) error {
		for name, content := range tree {
			if err := WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestReplaceDir(t *testing.T) {
	fallback := func(a, b string) error { return errors.ErrUnsupported }
	for name, exch := range map[string]func(a, b string) error{"exchange": exchange, "move aside": fallback} {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "out")
			first := map[string]string{"summary.json": "1", "runs/raw.trec": "r1", "runs/gold.trec": "g1"}
			if err := replaceDir(dir, writeTree(first), exch); err != nil {
				t.Fatal(err)
			}
			if got := files(t, dir); !maps.Equal(got, first) {
				t.Fatalf("new directory: %v, want %v", got, first)
			}
			// Fewer files the second time: none of the first is left.
			second := map[string]string{"summary.json": "2", "runs/raw.trec": "r2"}
			if err := replaceDir(dir, writeTree(second), exch); err != nil {
				t.Fatal(err)
			}
			if got := files(t, dir); !maps.Equal(got, second) {
				t.Fatalf("replaced directory: %v, want %v", got, second)
			}
			// A failed write leaves the directory as it was.
			boom := errors.New("boom")
			err := replaceDir(dir, func(tmp string) error {
				_ = writeTree(map[string]string{"summary.json": "3"})(tmp)
				return boom
			}, exch)
			if !errors.Is(err, boom) {
				t.Fatalf("err = %v, want the write's", err)
			}
			if got := files(t, dir); !maps.Equal(got, second) {
				t.Fatalf("after a failed write: %v, want %v", got, second)
			}
			// No temporary or set-aside sibling is left.
			entries, err := os.ReadDir(parent)
			if err != nil || len(entries) != 1 || entries[0].Name() != "out" {
				t.Fatalf("siblings left: %v %v", entries, err)
			}
		})
	}
}
