package retrieval

import (
	"math/rand/v2"
	"testing"

	"github.com/himes-rl/himes/retrieval/corpus"
)

// BenchmarkSearchTopK covers the searches whose top-k selection
// BenchmarkSearch does not: Lucene scoring (its own tie order) with the
// dense accumulator and with MaxScore, top-10 on the 20k-document Zipf
// corpus, and dense retrieval's top-10 of 20k cosines:
//
//	go test ./retrieval -run '^$' -bench SearchTopK -benchtime 2000x
func BenchmarkSearchTopK(b *testing.B) {
	ids, texts := corpus.Zipf(1, 20000, 20000, 60, 1.07)
	ix, err := BuildIndex(ids, texts, BM25Params{K1: 0.9, B: 0.4, Scoring: ScoringLucene})
	if err != nil {
		b.Fatal(err)
	}
	qs := corpus.ZipfQueries(2, 512, 20000, 20, 1.07)
	for _, dense := range []bool{true, false} {
		name := map[bool]string{true: "lucene-dense", false: "lucene-maxscore"}[dense]
		b.Run(name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				ix.searchLucene(qs[i%len(qs)], 10, dense)
			}
		})
	}
	r := rand.New(rand.NewPCG(3, 4))
	vecs := make([][]float32, 20000)
	for i := range vecs {
		vecs[i] = make([]float32, 64)
		for j := range vecs[i] {
			vecs[i][j] = float32(r.NormFloat64())
		}
	}
	d, err := NewDenseIndex(vecs, "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("dense-vectors", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := d.Search(vecs[i%len(vecs)], 10); err != nil {
				b.Fatal(err)
			}
		}
	})
}
