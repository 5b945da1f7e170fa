package evaluate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckOutputDir(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, files ...string) string {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dir, err string
	}{
		{"missing", filepath.Join(root, "none"), ""},
		{"empty", mk("empty"), ""},
		{"eval folder", mk("marked", OutputMarker, "summary.json"), ""},
		{"eval folder of an older himes", mk("legacy", "summary.json", "turns.parquet", "qrels.txt"), ""},
		{"other folder", mk("other", "notes.txt"), "is not a himes eval folder"},
		{"summary alone", mk("half", "summary.json"), "is not a himes eval folder"},
		{"a file", file, "is not a directory"},
	} {
		err := CheckOutputDir(c.dir)
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.err)
		}
	}
}

// ReplaceOutputDir marks the folder, so the next evaluation may replace it.
func TestReplaceOutputDirMarks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ev")
	write := func(tmp string) error { return os.WriteFile(filepath.Join(tmp, "summary.json"), []byte("{}"), 0o644) }
	if err := ReplaceOutputDir(dir, write); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, OutputMarker)); err != nil {
		t.Fatalf("no marker: %v", err)
	}
	if err := ReplaceOutputDir(dir, write); err != nil {
		t.Fatalf("replacing a marked folder: %v", err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ReplaceOutputDir(other, write); err == nil {
		t.Fatal("replaced a folder that is not an eval folder")
	}
	if b, err := os.ReadFile(filepath.Join(other, "notes.txt")); err != nil || string(b) != "mine" {
		t.Fatalf("the refused folder changed: %q %v", b, err)
	}
}
