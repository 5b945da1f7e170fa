package evaluate

// The ollama:<model> rewriter against a real Ollama server
// (internal/ollamatest; skipped without the ollama binary, run in CI).

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/httpcall"
	"github.com/himes-rl/himes/internal/ollama"
	"github.com/himes-rl/himes/internal/ollamatest"
)

func TestRealOllamaRewriter(t *testing.T) {
	s := ollamatest.Start(t)
	ctx := context.Background()
	rewrite := func(maxTokens int) string {
		t.Helper()
		o, err := NewOllama(ollamatest.Model, s.URL(), render, ollama.DefaultPolicy)
		if err != nil {
			t.Fatal(err)
		}
		o.MaxTokens = maxTokens
		got, err := o.Rewrite(ctx, demoTurn())
		if err != nil {
			t.Fatalf("%v\nserver log:\n%s", err, s.Log())
		}
		return got
	}
	long := rewrite(24)
	if long == "" {
		t.Fatal("empty rewrite")
	}
	// Greedy with a seed: the same prompt gives the same rewrite, and a
	// smaller num_predict cuts the same generation shorter.
	if again := rewrite(24); again != long {
		t.Errorf("rewrite changed: %q vs %q", again, long)
	}
	short := rewrite(3)
	if len(short) >= len(long) || !strings.HasPrefix(long, short) {
		t.Errorf("3-token rewrite %q is not a shorter prefix of the 24-token one %q", short, long)
	}
	t.Logf("rewrites: %q / %q", short, long)

	o, _ := NewOllama("no-such-model", s.URL(), render, ollama.DefaultPolicy)
	_, err := o.Rewrite(ctx, demoTurn())
	var nf *httpcall.ModelNotFoundError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "ollama pull no-such-model") {
		t.Errorf("missing model: %v", err)
	}
}
