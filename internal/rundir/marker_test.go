package rundir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Item 12 of issue 27: --overwrite deleted any directory holding a file
// named .himes-run, even an empty one. Only a marker himes wrote (its id and
// checksum verify) allows the delete.
func TestOverwriteTrustsOnlyAMarkerHimesWrote(t *testing.T) {
	cases := map[string]string{
		"empty":          "",
		"another file":   "my notes\n",
		"foreign JSON":   `{"format":"something-else"}`,
		"edited id":      "", // filled below from a real marker
		"no checksum v2": `{"format":"himes-run/2","created_at":"2026-01-01T00:00:00Z","resumes":0,"id":"abc"}`,
	}
	base := t.TempDir()
	real, err := Open(base, "real", New)
	if err != nil {
		t.Fatal(err)
	}
	real.Close()
	b, err := os.ReadFile(filepath.Join(base, "real", markerName))
	if err != nil {
		t.Fatal(err)
	}
	m, err := readMarkerFile(filepath.Join(base, "real", markerName))
	if err != nil || m.ID == "" || m.SHA256 == "" {
		t.Fatalf("himes's own marker %s: %v", b, err)
	}
	cases["edited id"] = strings.Replace(string(b), m.ID, "0000000000000000", 1)
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(base, strings.ReplaceAll(name, " ", "-"))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			user := filepath.Join(dir, "thesis.tex")
			_ = os.WriteFile(user, []byte("precious"), 0o644)
			_ = os.WriteFile(filepath.Join(dir, markerName), []byte(content), 0o644)
			_, err := Open(base, filepath.Base(dir), Overwrite)
			if err == nil || !strings.Contains(err.Error(), "not deleted") {
				t.Fatalf("got %v, want a refusal that deletes nothing", err)
			}
			if _, err := os.Stat(user); err != nil {
				t.Fatalf("the user's file is gone: %v", err)
			}
		})
	}
	// himes's own marker, and one of an older himes (no id, no checksum), allow it.
	for _, name := range []string{"real", "v1"} {
		if name == "v1" {
			dir := filepath.Join(base, "v1")
			_ = os.MkdirAll(dir, 0o755)
			_ = os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte("{}\n"), 0o644)
			_ = os.WriteFile(filepath.Join(dir, markerName), []byte(`{"format":"himes-run/1","created_at":"2026-01-01T00:00:00Z","resumes":2}`), 0o644)
		}
		r, err := Open(base, name, Overwrite)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r.Close()
	}
}
