package retrieval

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/memory"
)

// memoryEmbedderConfig is a dense first stage in the hashing space with a
// long-term memory in its own LSA space.
func memoryEmbedderConfig() Config {
	cfg := DefaultConfig()
	cfg.Method, cfg.Embedder, cfg.Candidates = "dense", "hash", 4
	cfg.LSADim, cfg.LSAMinDF = 2, 1
	cfg.Memory.Enabled, cfg.Memory.TopN, cfg.Memory.RetrievalWeight = true, 2, 0.5
	cfg.Memory.Embedder = "lsa"
	return cfg
}

// With memory.embedder set, the first stage keeps the pipeline's embedder
// and the memory — activation and the re-rank — works in its own space:
// the candidates are those of the same pipeline without memory, the
// activated memories' similarities are LSA cosines, and the fused scores
// are recomputed here with an LSA embedder fitted independently.
func TestMemoryEmbedderIsItsOwnSpace(t *testing.T) {
	kb := writeFile(t, "kb.jsonl", tinyKB)
	cfg := memoryEmbedderConfig()
	p, err := Open(t.Context(), cfg, kb)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := p.Embedder()
	memEmb, err := p.MemoryEmbedder()
	if err != nil {
		t.Fatal(err)
	}
	lsaCfg := DefaultConfig()
	lsaCfg.Embedder, lsaCfg.LSADim, lsaCfg.LSAMinDF = "lsa", 2, 1
	lp, err := Open(t.Context(), lsaCfg, kb)
	if err != nil {
		t.Fatal(err)
	}
	lsa, err := lp.Embedder()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first.Name(), "hash") || memEmb.Name() != lsa.Name() {
		t.Fatalf("embedders: first stage %s, memory %s; want hash and %s", first.Name(), memEmb.Name(), lsa.Name())
	}
	entries := []memory.Entry{
		{User: "u", ID: "a", Text: "garage door springs lubrication"},
		{User: "u", ID: "b", Text: "sliding doors need lubrication"},
	}
	if _, err := AttachMemory(t.Context(), cfg.Memory, p, entries); err != nil {
		t.Fatal(err)
	}
	if got := p.Memory().Embedder().Name(); got != lsa.Name() {
		t.Fatalf("memories embedded with %s, want %s", got, lsa.Name())
	}
	query, rewrite := "garage door problems", "garage door opener"
	res, err := p.Retrieve(t.Context(), "u", rewrite, query)
	if err != nil {
		t.Fatal(err)
	}
	off := cfg
	off.Memory.Enabled = false
	po, err := Open(t.Context(), off, kb)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := po.Retrieve(t.Context(), "u", rewrite, query)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Trace.Candidates, plain.Trace.Candidates) {
		t.Fatalf("first stage: %+v with the memory, %+v without", res.Trace.Candidates, plain.Trace.Candidates)
	}
	embed := func(text string) []float32 {
		v, err := lsa.Embed(t.Context(), []string{text})
		if err != nil {
			t.Fatal(err)
		}
		return v[0]
	}
	qv := embed(query)
	for _, m := range res.Trace.Memories {
		if want := embedding.Cosine(qv, embed(m.Text)); math.Abs(m.Sim-want) > 1e-9 {
			t.Errorf("memory %s: similarity %v, LSA cosine %v", m.ID, m.Sim, want)
		}
	}
	checkFusedByHand(t, p, res, lsa, 0.5)

	// a store built in the first stage's space is refused
	wrong, err := memory.Build(t.Context(), cfg.Memory, first, entries)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetMemory(wrong); err == nil || !strings.Contains(err.Error(), first.Name()) || !strings.Contains(err.Error(), lsa.Name()) {
		t.Errorf("memory in the hashing space: %v, want a refusal naming both embedders", err)
	}
}

// An index built for a memory in the LSA space persists the LSA model, and
// a pipeline opened on it loads the same model as one fitted anew.
func TestMemoryEmbedderLSAPersistedWithIndex(t *testing.T) {
	kb := writeFile(t, "kb.jsonl", tinyKB)
	cfg := memoryEmbedderConfig()
	cfg.Method = "bm25"
	fe, pe := fittedAndPersisted(t, &cfg, kb, (*Pipeline).MemoryEmbedder)
	if pe.Name() != fe.Name() {
		t.Fatalf("persisted memory embedder %s, fitted %s", pe.Name(), fe.Name())
	}
	a, _ := fe.Embed(t.Context(), []string{"garage door springs"})
	b, _ := pe.Embed(t.Context(), []string{"garage door springs"})
	if !slices.Equal(a[0], b[0]) {
		t.Errorf("persisted LSA embeds %v, fitted %v", b[0], a[0])
	}
}

// memory.embedder is validated by name, with the settings of the embedder
// it names, and an empty one is the retrieval embedder.
func TestMemoryEmbedderConfig(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.MemoryEmbedder() != "hash" || cfg.ForMemory().Embedder != "hash" {
		t.Errorf("default memory embedder %q, want the retrieval embedder hash", cfg.MemoryEmbedder())
	}
	cfg.Memory.Embedder = "bert"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "memory.embedder") || !strings.Contains(err.Error(), `"bert"`) {
		t.Errorf("memory.embedder bert: %v", err)
	}
	cfg.Memory.Embedder, cfg.OllamaURL = "ollama", ""
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "ollama_url") {
		t.Errorf("memory.embedder ollama without a URL: %v", err)
	}
	if !cfg.UsesEmbedder("ollama") || !cfg.UsesEmbedder("hash") || cfg.UsesEmbedder("lsa") {
		t.Errorf("UsesEmbedder with embedder hash, memory ollama: wrong")
	}
	if got := cfg.ForMemory(); got.Embedder != "ollama" || cfg.Embedder != "hash" {
		t.Errorf("ForMemory: %q (and the original became %q)", got.Embedder, cfg.Embedder)
	}
	cfg.Memory.Embedder, cfg.OllamaURL = "lsa", "http://localhost:11434"
	if err := cfg.Validate(); err != nil {
		t.Errorf("memory.embedder lsa: %v", err)
	}
}
