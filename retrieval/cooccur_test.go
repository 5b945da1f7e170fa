package retrieval

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/analysis"
)

func TestCoDFSmall(t *testing.T) {
	ix, err := BuildIndex([]string{"a", "b", "c", "d"},
		[]string{"apple pie", "apple tart pie", "tart", "Pie pie crust"}, BM25Params{K1: 0.9, B: 0.4})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"apple", "pie", 2}, {"pie", "apple", 2}, {"tart", "pie", 1}, {"apple", "crust", 0},
		{"pie", "pie", 3}, {"pie", "crust", 1}, {"apple", "missing", 0}, {"missing", "missing", 0},
	} {
		if got := ix.CoDF(c.a, c.b); got != c.want {
			t.Errorf("CoDF(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// Posting lists of several blocks exercise the seeks; the expectation is a
// direct count over the documents' word sets.
func TestCoDFMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	vocab := []string{"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"}
	n := 1000
	ids, texts := make([]string, n), make([]string, n)
	sets := make([]map[string]bool, n)
	for d := range n {
		ids[d] = fmt.Sprintf("d%05d", d)
		sets[d] = map[string]bool{}
		var ws []string
		for k, w := range vocab {
			// w0 is in most documents, w7 in few: lists of very different lengths
			if rng.Float64() < 0.9/float64(k+1) {
				ws = append(ws, w)
				sets[d][w] = true
			}
		}
		texts[d] = strings.Join(append(ws, "filler"), " ")
	}
	ix, err := BuildIndex(ids, texts, BM25Params{K1: 0.9, B: 0.4})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range vocab {
		for _, b := range vocab {
			want := 0
			for _, s := range sets {
				if s[a] && s[b] {
					want++
				}
			}
			if got := ix.CoDF(a, b); got != want {
				t.Errorf("CoDF(%s, %s) = %d, want %d", a, b, got, want)
			}
		}
	}
}

// An on-disk index counts co-occurrences as its in-memory twin does. (Before
// the vocabulary moved behind termID, CoDF read the in-memory term map, which
// an on-disk index leaves empty, so it returned 0 for every pair there and the
// embedded rewriter's association features silently vanished.)
func TestCoDFOnDiskEqualsInMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): builds the demo KB's on-disk index")
	}
	kb := filepath.Join("..", "datasets", "demo", "passages.jsonl")
	cfg := DefaultConfig()
	mem, chunks := memoryTwin(t, cfg, kb)
	disk, _, _ := buildDisk(t, cfg, kb, DiskBuildOptions{BlockDocs: 300, Workers: 2})
	an, err := analysis.New(cfg.Analyzer)
	if err != nil {
		t.Fatal(err)
	}
	nonzero := 0
	for _, q := range queriesFrom(chunks, an, 60, 3) {
		for i := range q {
			for j := range q {
				want := mem.CoDF(q[i], q[j])
				if got := disk.CoDF(q[i], q[j]); got != want {
					t.Fatalf("CoDF(%q, %q): on disk %d, in memory %d", q[i], q[j], got, want)
				}
				if want > 0 {
					nonzero++
				}
			}
		}
	}
	if nonzero == 0 {
		t.Fatal("no pair co-occurs: the comparison tested nothing")
	}
}
