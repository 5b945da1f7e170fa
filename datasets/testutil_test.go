package datasets

import (
	"os"
	"path/filepath"
	"testing"
)

// repoRoot walks up from the package directory to the directory holding go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// sharedData returns ../shared/data relative to the repository root, or
// skips the test when the reference data is not there.
func sharedData(t testing.TB) string {
	t.Helper()
	d := filepath.Join(repoRoot(t), "..", "shared", "data")
	if _, err := os.Stat(filepath.Join(d, "conversations")); err != nil {
		t.Skipf("shared reference data not available: %v", err)
	}
	return d
}
