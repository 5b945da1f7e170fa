package configs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Item 13 of issue 27: run.name had no length limit, and a 20 MB name gave
// a 40 MB error message. A name over 200 bytes is refused in a short error.
func TestRunNameLengthIsBounded(t *testing.T) {
	long := strings.Repeat("n", 1<<20)
	for name, overrides := range map[string][]string{
		"--set":        {"run.name=" + long},
		"with a slash": {"run.name=" + long + "/x"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeConfig(t, valid), overrides)
			if err == nil || !strings.Contains(err.Error(), "run.name") || !strings.Contains(err.Error(), "at most 200") {
				t.Fatalf("got %.200v, want a refusal naming run.name and its limit", err)
			}
			if len(err.Error()) > 400 {
				t.Fatalf("error of %d bytes for a long name", len(err.Error()))
			}
		})
	}
	// In a file, the same.
	p := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(p, []byte("run: {name: "+strings.Repeat("x", 201)+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p, nil); err == nil || !strings.Contains(err.Error(), "at most 200") || len(err.Error()) > 400 {
		t.Fatalf("got %v", err)
	}
	if _, err := Load(writeConfig(t, valid), []string{"run.name=" + strings.Repeat("x", 200)}); err != nil {
		t.Fatalf("a 200-byte name: %v", err)
	}
}
