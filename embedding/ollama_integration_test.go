package embedding

// The Ollama embedder and topic classifier against a real Ollama server
// (internal/ollamatest; skipped without the ollama binary, run in CI).

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/himes-rl/himes/internal/httpcall"
	"github.com/himes-rl/himes/internal/ollamatest"
)

func TestRealOllamaEmbed(t *testing.T) {
	s := ollamatest.Start(t)
	ctx := context.Background()
	cache := t.TempDir()
	e, err := NewOllama(s.URL(), ollamatest.Model, 2, cache)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"the eiffel tower", "who wrote dune", "the eiffel tower", "a third text"}
	// Batches of 2: four texts are two /api/embed requests.
	vecs, err := e.Embed(ctx, texts)
	if err != nil {
		t.Fatalf("%v\nserver log:\n%s", err, s.Log())
	}
	if len(vecs) != 4 || e.Dim() == 0 {
		t.Fatalf("%d vectors, dim %d", len(vecs), e.Dim())
	}
	for i, v := range vecs {
		if len(v) != e.Dim() {
			t.Errorf("vector %d has dimension %d, want %d", i, len(v), e.Dim())
		}
		var n float64
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		if math.Abs(n-1) > 1e-5 {
			t.Errorf("vector %d has squared norm %v, want 1 (L2-normalized)", i, n)
		}
	}
	// The same text embeds identically; different texts differ.
	if c := Cosine(vecs[0], vecs[2]); math.Abs(c-1) > 1e-6 {
		t.Errorf("cosine of identical texts %v", c)
	}
	if c := Cosine(vecs[0], vecs[1]); c > 0.9999 {
		t.Errorf("different texts embed alike: cosine %v", c)
	}
	// Cached: a second embedder reads every vector from disk, even with the
	// server gone.
	s.Stop()
	e2, err := NewOllama(s.URL(), ollamatest.Model, 2, cache)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e2.Embed(ctx, texts[:2])
	if err != nil {
		t.Fatalf("cached texts need no server: %v", err)
	}
	for i := range again {
		if Cosine(again[i], vecs[i]) < 1-1e-6 {
			t.Errorf("cached vector %d differs", i)
		}
	}
	// An uncached text with the server down is an error, not a zero vector.
	if _, err := e2.Embed(ctx, []string{"never embedded"}); err == nil {
		t.Fatal("embedding against a dead server succeeded")
	}

	// A model the server does not have is a clear error naming the fix.
	s.Start()
	e3, _ := NewOllama(s.URL(), "no-such-model", 2, "")
	_, err = e3.Embed(ctx, []string{"x"})
	var nf *httpcall.ModelNotFoundError
	if !errors.As(err, &nf) {
		t.Errorf("missing model: %v, want a ModelNotFoundError", err)
	}
}
