package ollamaserve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A server that exits before answering is an error carrying its output,
// not a hang and not a running Server.
func TestStartReportsEarlyExit(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ollama")
	script := "#!/bin/sh\necho \"Error: listen tcp $OLLAMA_HOST: address already in use\" >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Start(t.Context(), Options{Bin: bin})
	if err == nil {
		s.Stop()
		t.Fatal("a server that exits at once started")
	}
	if !strings.Contains(err.Error(), "exited before answering") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error %q: want the early exit and the server's own message", err)
	}
}

func TestFindBinaryNamesMissingOverride(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-ollama")
	t.Setenv("HIMES_OLLAMA_BIN", missing)
	if _, err := FindBinary(); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("FindBinary with HIMES_OLLAMA_BIN=%s: %v, want an error naming it", missing, err)
	}
}
