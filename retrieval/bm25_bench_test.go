package retrieval

import (
	"path/filepath"
	"testing"
)

// BenchmarkSearch compares MaxScore top-10 with the exhaustive reference on
// a 20k-document Zipf corpus, side by side:
//
//	go test ./retrieval -run '^$' -bench Search -benchtime 2000x
func BenchmarkSearch(b *testing.B) {
	ids, texts := ZipfCorpus(1, 20000, 20000, 60, 1.07)
	ix, err := BuildIndex(ids, texts, BM25Params{K1: 0.9, B: 0.4})
	if err != nil {
		b.Fatal(err)
	}
	qs := ZipfQueries(2, 512, 20000, 20, 1.07)
	b.Run("maxscore", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			ix.Search(qs[i%len(qs)], 10)
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
	ids, texts := ZipfCorpus(1, 20000, 20000, 60, 1.07)
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
	kb := filepath.Join(sharedData(b), "kb", "passages.jsonl")
	for _, memOn := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.Candidates, cfg.Memory.Enabled = 20, memOn
		p, err := Open(b.Context(), cfg, kb)
		if err != nil {
			b.Fatal(err)
		}
		if memOn {
			emb, _ := p.Embedder()
			var es []MemoryEntry
			for _, q := range []string{"garage door opener going bad", "why did it stop working", "cost to fix a garage door",
				"replace the opener", "garage door safety", "choose a new opener"} {
				es = append(es, MemoryEntry{User: "u", Query: q})
			}
			m, err := BuildMemory(b.Context(), cfg.Memory, emb, es)
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
