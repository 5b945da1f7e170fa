package launch

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/ollamatest"
)

// A real Ollama server (scripts/ci/setup-ollama.sh builds v0.6.5) started,
// used and stopped through the same mechanism as the trainer. Skipped
// without the binary; a failure under CI=true.
func TestOllamaServer(t *testing.T) {
	bin := ollamatest.Binary(t)
	dir := t.TempDir()
	spec, err := Ollama(bin, filepath.Join(dir, "ollama.log"), filepath.Join(dir, "models"), "HOME="+dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(p.URL() + "/api/tags")
	if err != nil {
		p.Stop()
		t.Fatal(err)
	}
	var tags struct {
		Models []any `json:"models"`
	}
	err = json.NewDecoder(resp.Body).Decode(&tags)
	resp.Body.Close()
	if err != nil || len(tags.Models) != 0 {
		t.Errorf("/api/tags of a fresh model directory: %v, %d models", err, len(tags.Models))
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	waitDead(t, p.Pid())
	if _, err := http.Get(p.URL() + "/api/version"); err == nil {
		t.Error("the server still answers after Stop")
	}
	lines, _ := LastLines(spec.Log, 50)
	if !strings.Contains(strings.Join(lines, "\n"), "Listening on") {
		t.Errorf("ollama's log lacks its listening line: %q", lines)
	}
}
