package retrieval

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/retrieval/corpus"
)

// Search strategies, forced so that each is checked whatever the index
// size selects.
const (
	maxScore = iota
	denseBlocks
	denseImpacts
)

func (ix *Index) searchStrategy(tokens []string, k int, strategy int) []Hit {
	if k <= 0 {
		return nil
	}
	sc := ix.getScratch()
	defer ix.scratch.Put(sc)
	sc.qs = ix.prepare(tokens, sc.qs, &sc.pos)
	clear(sc.pos)
	if len(sc.qs) == 0 {
		return nil
	}
	switch strategy {
	case denseBlocks:
		return ix.searchDense(sc, k, false)
	case denseImpacts:
		return ix.searchDense(sc, k, true)
	}
	return ix.search(sc, k)
}

func checkAgainstExhaustive(t *testing.T, ix *Index, q []string, k int) {
	t.Helper()
	want := ix.SearchExhaustive(q, k)
	for _, strategy := range []int{maxScore, denseBlocks, denseImpacts} {
		got := ix.searchStrategy(q, k, strategy)
		if len(got) != len(want) {
			t.Fatalf("strategy %d query %v k=%d: %d hits, reference %d", strategy, q, k, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("strategy %d query %v k=%d rank %d: got %+v, reference %+v", strategy, q, k, i+1, got[i], want[i])
			}
		}
	}
}

// TestBothStrategiesAgreeWithExhaustive checks MaxScore and the dense
// accumulator against the reference on a corpus with many exact duplicates
// (ties), on random queries with repeated and unknown terms, including
// queries longer than the duplicate-scan limit.
func TestBothStrategiesAgreeWithExhaustive(t *testing.T) {
	ids, texts := corpus.Zipf(7, 3000, 2000, 40, 1.1)
	for i := 0; i+1 < len(texts); i += 17 {
		texts[i+1] = texts[i]
	}
	ix, err := BuildIndex(ids, texts, BM25Params{K1: 0.9, B: 0.4})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	queries := corpus.ZipfQueries(13, 300, 2000, 0, 1.1)
	queries = append(queries, corpus.ZipfQueries(17, 20, 2000, 80, 1.1)...) // > longQuery distinct terms
	for qi, q := range queries {
		switch qi % 4 {
		case 0:
			q = append(q, q[0]) // repeated term
		case 1:
			q = append(q, "notaterm")
		}
		checkAgainstExhaustive(t, ix, q, []int{1, 3, 10, 20, 50, 1000}[r.IntN(6)])
	}
	if ix.impOff == nil {
		t.Fatal("a 3,000-document index keeps no decoded impacts")
	}
	for _, strategy := range []int{maxScore, denseBlocks, denseImpacts} {
		if got := ix.searchStrategy([]string{"notaterm"}, 10, strategy); len(got) != 0 {
			t.Fatalf("strategy %d, unknown term: %v", strategy, got)
		}
	}
}

// TestBothStrategiesAgreeOnDemo checks both strategies on the GRPO
// benchmark's long queries over the demo KB.
func TestBothStrategiesAgreeOnDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): runs every long query of the GRPO benchmark with both strategies")
	}
	p, err := Open(t.Context(), DefaultConfig(), filepath.Join("..", "datasets", "demo", "passages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range demoLongQueries(t) {
		checkAgainstExhaustive(t, p.Index(), q, 20)
	}
}

// TestSearchTextMatchesTokenize checks that searching text directly finds
// what searching its analyzed tokens finds, with both analyzers.
func TestSearchTextMatchesTokenize(t *testing.T) {
	texts := append(demoLongTexts(t), "", "!!!", "The THE the", "zzzunknown what's 1951?", strings.Repeat("water level ", 40))
	for _, name := range []string{analysis.Plain, analysis.English} {
		cfg := DefaultConfig()
		cfg.Analyzer = name
		p, err := Open(t.Context(), cfg, filepath.Join("..", "datasets", "demo", "passages.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		ix := p.Index()
		for _, text := range texts {
			got, want := ix.SearchText(text, 20), ix.Search(ix.Analyzer().Tokenize(text), 20)
			if !slices.Equal(got, want) {
				t.Fatalf("%s analyzer, %q: SearchText %v, Search %v", name, text, got, want)
			}
		}
	}
}

// SearchBatch (one worker per core over the queries) returns each query's
// own ranking, in the queries' order, as searchLocal does one at a time.
func TestSearchBatchKeepsQueryOrder(t *testing.T) {
	p, err := Open(t.Context(), DefaultConfig(), filepath.Join("..", "datasets", "demo", "passages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	texts := append(demoLongTexts(t), "", "water level", "zzzunknown")
	lists, errs := p.SearchBatch(t.Context(), texts, 20)
	if len(lists) != len(texts) || len(errs) != len(texts) {
		t.Fatalf("%d lists, %d errors for %d queries", len(lists), len(errs), len(texts))
	}
	for i, text := range texts {
		want, err := p.searchLocal(t.Context(), text, 20)
		if err != nil || errs[i] != nil {
			t.Fatalf("query %d: %v, %v", i, err, errs[i])
		}
		if !reflect.DeepEqual(lists[i], want) {
			t.Fatalf("query %d (%q): batch %v, alone %v", i, text, lists[i], want)
		}
	}
}

// TestImpactsFallBackToBlocks builds an index with more distinct
// saturations (pairs of tf and document length) than impacts can number,
// 50 tfs in each of 1,400 documents of distinct lengths: it keeps no
// impacts, and searches the blocks with the reference's results.
func TestImpactsFallBackToBlocks(t *testing.T) {
	var ids, texts []string
	for d := range 1400 {
		var b strings.Builder
		for j := 1; j <= 50; j++ {
			for range j {
				fmt.Fprintf(&b, "t%d ", j)
			}
		}
		for range d {
			b.WriteString("pad ")
		}
		ids, texts = append(ids, fmt.Sprintf("doc%05d", d)), append(texts, b.String())
	}
	ix, err := BuildIndex(ids, texts, BM25Params{K1: 0.9, B: 0.4})
	if err != nil {
		t.Fatal(err)
	}
	if ix.impOff != nil || ix.satVal != nil {
		t.Fatalf("%d distinct saturations kept as impacts", len(ix.satVal))
	}
	for _, q := range [][]string{{"t1"}, {"t7", "t50"}, {"pad", "t3", "t49"}} {
		want := ix.SearchExhaustive(q, 10)
		if got := ix.Search(q, 10); len(want) != 10 || !slices.Equal(got, want) {
			t.Fatalf("query %v: %v, reference %v", q, got, want)
		}
		if got := ix.searchStrategy(q, 10, maxScore); !slices.Equal(got, want) {
			t.Fatalf("query %v, MaxScore: %v, reference %v", q, got, want)
		}
	}
}
