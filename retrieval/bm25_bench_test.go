package retrieval

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/memory"
	"github.com/himes-rl/himes/retrieval/corpus"
)

// BenchmarkSearch compares Search's choice (the dense accumulator at this
// size), MaxScore and the exhaustive reference, top-10 on a 20k-document
// Zipf corpus, side by side:
//
//	go test ./retrieval -run '^$' -bench Search -benchtime 2000x
func BenchmarkSearch(b *testing.B) {
	ids, texts := corpus.Zipf(1, 20000, 20000, 60, 1.07)
	ix, err := BuildIndex(ids, texts, BM25Params{K1: 0.9, B: 0.4})
	if err != nil {
		b.Fatal(err)
	}
	qs := corpus.ZipfQueries(2, 512, 20000, 20, 1.07)
	b.Run("search", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			ix.Search(qs[i%len(qs)], 10)
		}
	})
	b.Run("maxscore", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			ix.searchStrategy(qs[i%len(qs)], 10, maxScore)
		}
	})
	b.Run("exhaustive", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			ix.SearchExhaustive(qs[i%len(qs)], 10)
		}
	})
}

// BenchmarkBuildIndex measures indexing throughput (documents per second in
// the docs/s metric).
func BenchmarkBuildIndex(b *testing.B) {
	ids, texts := corpus.Zipf(1, 20000, 20000, 60, 1.07)
	for b.Loop() {
		if _, err := BuildIndex(ids, texts, BM25Params{K1: 0.9, B: 0.4}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(ids))/b.Elapsed().Seconds(), "docs/s")
}

// BenchmarkRetrieve is one rollout's retrieval on the shared 4,040-passage
// KB: BM25 top-20, then with memory on (hash embedder, 6 memories of the
// user), activation and mean-cosine re-ranking.
//
//	go test ./retrieval -run '^$' -bench Retrieve -benchtime 300x
func BenchmarkRetrieve(b *testing.B) {
	kb := filepath.Join(sharedtest.SharedDir(b), "kb", "passages.jsonl")
	for _, memOn := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.Candidates, cfg.Memory.Enabled = 20, memOn
		p, err := Open(b.Context(), cfg, kb)
		if err != nil {
			b.Fatal(err)
		}
		if memOn {
			emb, _ := p.Embedder()
			var es []memory.Entry
			for _, q := range []string{"garage door opener going bad", "why did it stop working", "cost to fix a garage door",
				"replace the opener", "garage door safety", "choose a new opener"} {
				es = append(es, memory.Entry{User: "u", Text: q})
			}
			m, err := memory.Build(b.Context(), cfg.Memory, emb, es)
			if err != nil {
				b.Fatal(err)
			}
			p.SetMemory(m)
		}
		name := map[bool]string{false: "bm25", true: "bm25+memory"}[memOn]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := p.Retrieve(b.Context(), "u", "how long do garage door openers last", "how long do they last?"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// demoLongQueries are queries shaped like a term-selection rewriter's output
// on the demo training set: the question plus up to 12 content words (longer
// than 4 letters) of the history, tokenized with the plain analyzer.
func demoLongQueries(b testing.TB) [][]string {
	var qs [][]string
	for _, text := range demoLongTexts(b) {
		qs = append(qs, analysis.Analyzer{}.Tokenize(text))
	}
	return qs
}

// demoLongTexts are demoLongQueries before analysis.
func demoLongTexts(b testing.TB) []string {
	b.Helper()
	data, err := os.ReadFile(filepath.Join("..", "datasets", "demo", "train.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	var qs []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		var turn struct {
			Question string `json:"question"`
			History  []struct {
				Text string `json:"text"`
			} `json:"history"`
		}
		if err := json.Unmarshal([]byte(line), &turn); err != nil {
			b.Fatal(err)
		}
		var hist []string
		for _, m := range turn.History {
			for _, w := range strings.Fields(m.Text) {
				if len(w) > 4 {
					hist = append(hist, w)
				}
			}
		}
		for k := range 4 {
			words := []string{turn.Question}
			for j := k; j < len(hist) && len(words) < 12; j += k + 2 {
				words = append(words, hist[j])
			}
			qs = append(qs, strings.Join(words, " "))
		}
	}
	return qs
}

// BenchmarkSearchDemoLong is the GRPO step benchmark's retrieval alone:
// top-20 for long queries over the 1,951-passage demo KB, with Search's
// choice and with each strategy forced.
//
//	go test ./retrieval -run '^$' -bench SearchDemoLong -benchtime 5000x
func BenchmarkSearchDemoLong(b *testing.B) {
	p, err := Open(b.Context(), DefaultConfig(), filepath.Join("..", "datasets", "demo", "passages.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	ix, qs, texts := p.Index(), demoLongQueries(b), demoLongTexts(b)
	b.Run("retrieve", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := p.Retrieve(b.Context(), "u", texts[i%len(texts)], "q"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("search", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			ix.Search(qs[i%len(qs)], 20)
		}
	})
	for _, v := range []struct {
		name     string
		strategy int
	}{{"maxscore", maxScore}, {"dense-blocks", denseBlocks}, {"dense-impacts", denseImpacts}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				ix.searchStrategy(qs[i%len(qs)], 20, v.strategy)
			}
		})
	}
}
