// Package sharedtest finds the files tests read outside their own package: the
// repository root, and the shared reference data (../shared/data beside the
// checkout) that CI provides. A clone without ../shared skips those tests with
// a visible reason; under CI=true a missing ../shared is a failure, so CI can
// never pass by skipping them.
package sharedtest

import (
	"os"
	"path/filepath"
	"testing"
)

// RepoRoot walks up from the test's working directory to the directory
// holding go.mod.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// SharedDir returns ../shared/data relative to the repository root. When it
// is missing, the test is skipped with the reason, or fails when CI=true.
func SharedDir(tb testing.TB) string {
	tb.Helper()
	d := filepath.Join(RepoRoot(tb), "..", "shared", "data")
	if _, err := os.Stat(filepath.Join(d, "conversations")); err != nil {
		missing(tb, d, err)
	}
	return d
}

// Shared returns the path of a file under ../shared/data (rel uses slashes,
// e.g. "metrics/ir_vectors.json"), skipping or failing like SharedDir when
// it is missing.
func Shared(tb testing.TB, rel string) string {
	tb.Helper()
	p := filepath.Join(RepoRoot(tb), "..", "shared", "data", filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		missing(tb, p, err)
	}
	return p
}

func missing(tb testing.TB, path string, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("shared reference data missing under CI=true (%s): %v", path, err)
	}
	tb.Skipf("SKIP: shared reference data not available (%s): %v — clone the project next to ../shared to run this test", path, err)
}
