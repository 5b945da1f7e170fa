package retrieval

import "testing"

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
