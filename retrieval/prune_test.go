package retrieval

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/memory"
)

// The candidates reachable keeps give, re-ranked, the full re-rank's top k:
// the same candidates, in the same order, with the same scores bit for bit,
// on random candidates with tied scores, zero and repeated vectors, and
// weights up to 1.
func TestReachableKeepsTheTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	pruned := 0
	for trial := range 4000 {
		n := 1 + rng.IntN(60)
		k := 1 + rng.IntN(10)
		dim := 2 + rng.IntN(6)
		vec := func() []float32 {
			v := make([]float32, dim)
			if rng.IntN(20) == 0 {
				return v // a zero vector scores 0 against anything
			}
			for i := range v {
				v[i] = float32(rng.NormFloat64())
			}
			return v
		}
		cands := make([]Ranked, n)
		vecs := make([][]float32, n)
		for i := range cands {
			score := math.Round(rng.Float64()*20) / 2 // ties are common
			if rng.IntN(2) == 0 {
				score = rng.Float64() * 10
			}
			cands[i] = Ranked{Chunk: Chunk{ID: fmt.Sprintf("c%d", i)}, Score: score}
			vecs[i] = vec()
			if i > 0 && rng.IntN(8) == 0 {
				vecs[i] = vecs[i-1]
			}
		}
		mems := make([][]float32, 1+rng.IntN(5))
		for i := range mems {
			mems[i] = vec()
		}
		w := []float64{0.9, 0.5, 1, 0.999999, 0.01, rng.Float64()}[rng.IntN(6)]
		full, err := Rerank(cands, vecs, mems, w)
		if err != nil {
			t.Fatal(err)
		}
		headVecs := vecs[:min(k, n)]
		keep := reachable(cands, headVecs, mems, w, k)
		keptVecs := make([][]float32, len(keep))
		for j, i := range keep {
			keptVecs[j] = vecs[i]
		}
		lo, hi := scoreRange(cands)
		got := rerankIn(pick(cands, keep), keptVecs, mems, w, lo, hi)
		top := min(k, n)
		if !reflect.DeepEqual(got[:top], full[:top]) {
			t.Fatalf("trial %d (n %d, k %d, w %v): top %d of the kept candidates %v, of all %v", trial, n, k, w, top, got[:top], full[:top])
		}
		if len(keep) < n {
			pruned++
		}
	}
	if pruned < 1000 {
		t.Errorf("only %d of 4000 trials pruned anything: the test checks little", pruned)
	}
}

// reachable by hand: retrieval scores 10, 9, 1, 0 normalize to 1, 0.9,
// 0.1, 0; one memory, e1; k 1, w 0.9.
func TestReachableByHand(t *testing.T) {
	cands := []Ranked{{Chunk: Chunk{ID: "a"}, Score: 10}, {Chunk: Chunk{ID: "b"}, Score: 9},
		{Chunk: Chunk{ID: "c"}, Score: 1}, {Chunk: Chunk{ID: "d"}, Score: 0}}
	mems := [][]float32{{1, 0}}
	// a's vector is the memory: fused 0.1·1 + 0.9·1 = 1. The others can reach
	// at most 0.1·1 + 0.9·n: b 0.91, c 0.19, d 0.1, all below 1.
	if got := reachable(cands, [][]float32{{1, 0}}, mems, 0.9, 1); !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("a on the memory: kept %v, want [0]", got)
	}
	// a orthogonal to the memory: fused 0.9. b can reach 0.91 ≥ 0.9; c, d not.
	if got := reachable(cands, [][]float32{{0, 1}}, mems, 0.9, 1); !reflect.DeepEqual(got, []int{0, 1}) {
		t.Errorf("a orthogonal: kept %v, want [0 1]", got)
	}
	// a opposite: fused 0.8. b (0.91) and c? 0.19 < 0.8: kept a, b.
	if got := reachable(cands, [][]float32{{-1, 0}}, mems, 0.9, 1); !reflect.DeepEqual(got, []int{0, 1}) {
		t.Errorf("a opposite: kept %v, want [0 1]", got)
	}
	// two memories e1 and e2: ‖mean‖ = √0.5 ≈ 0.707 bounds the memory term,
	// so with a at 0.1·0.5 + 0.9 = 0.95 (a = e1) b reaches 0.0707 + 0.81 < 0.95
	if got := reachable(cands, [][]float32{{1, 0}}, [][]float32{{1, 0}, {0, 1}}, 0.9, 1); !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("two memories: kept %v, want [0]", got)
	}
	// w 0 (the paper's pure re-rank) and k ≥ n keep everything
	for _, c := range []struct {
		w float64
		k int
	}{{0, 1}, {0.9, 4}, {0.9, 9}} {
		head := [][]float32{{1, 0}, {1, 0}, {1, 0}, {1, 0}}[:min(c.k, 4)]
		if got := reachable(cands, head, mems, c.w, c.k); len(got) != 4 {
			t.Errorf("w %v k %d: kept %v, want all 4", c.w, c.k, got)
		}
	}
}

// memoryBound is never below a candidate's mean cosine with the memories.
func TestMemoryBoundHolds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for range 20000 {
		dim := 1 + rng.IntN(8)
		vec := func() []float32 {
			v := make([]float32, dim)
			for i := range v {
				v[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
			}
			return v
		}
		mems := make([][]float32, 1+rng.IntN(6))
		for i := range mems {
			mems[i] = vec()
		}
		c := vec()
		if rng.IntN(3) == 0 { // the best candidate: along the memories' mean
			c = make([]float32, dim)
			for _, h := range mems {
				var n float64
				for _, x := range h {
					n += float64(x) * float64(x)
				}
				n = math.Sqrt(n)
				for i := range c {
					c[i] += float32(float64(h[i]) / n)
				}
			}
		}
		mean := 0.0
		for _, h := range mems {
			mean += embedding.Cosine(c, h)
		}
		mean /= float64(len(mems))
		if b := memoryBound(mems); mean > b {
			t.Fatalf("mean cosine %v above the bound %v", mean, b)
		}
	}
}

// A batch of requests with memory embeds only the candidates that can reach
// the top k, and its results are those of the full re-rank
// (RerankCandidates, which embeds every candidate): same chunks, scores and
// trace. With retrieval_weight 0 nothing is pruned.
func TestRetrieveBatchPrunesWithTheSameResults(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("garage door opener spring noise battery remote wine red white fish meat cheese " +
		"travel rome hotel flight museum beach tuition university degree course exam loan bank rate fee")
	var kb strings.Builder
	for i := range 120 {
		var text []string
		for range 6 + rng.IntN(14) {
			text = append(text, words[rng.IntN(len(words))])
		}
		fmt.Fprintf(&kb, `{"id":"p%d","title":"title%d","text":%q}`+"\n", i, i, strings.Join(text, " "))
	}
	kbPath := writeFile(t, "kb.jsonl", kb.String())
	var entries []memory.Entry
	var reqs []Request
	for _, u := range []string{"ann", "bob", "cy"} {
		for i := range 4 {
			q := strings.Join([]string{words[rng.IntN(len(words))], words[rng.IntN(len(words))], words[rng.IntN(len(words))]}, " ")
			entries = append(entries, memory.Entry{User: u, ID: fmt.Sprintf("q%d", i+1), Text: q, Seq: int64(i + 1)})
			reqs = append(reqs, Request{User: u, Query: q})
		}
	}
	for _, w := range []float64{0.9, 0.5, 0} {
		t.Run(fmt.Sprintf("w=%v", w), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Candidates, cfg.TopK = 60, 3
			cfg.Memory.Enabled, cfg.Memory.TopN, cfg.Memory.MinPartition = true, 3, 1000
			cfg.Memory.RerankFloor, cfg.Memory.RetrievalWeight = -1, w // re-rank every request
			open := func() (*CausalRetriever, *prefetching) {
				p, err := Open(t.Context(), cfg, kbPath)
				if err != nil {
					t.Fatal(err)
				}
				e := &prefetching{inner: p.emb, memo: map[string][]float32{}}
				p.emb, p.memEmb = e, e
				c, err := AttachMemory(t.Context(), cfg.Memory, p, entries)
				if err != nil {
					t.Fatal(err)
				}
				e.texts = nil // count only what the requests embed
				return c, e
			}
			batched, eb := open()
			// The pipeline's own RetrieveBatch: Seq 0, every memory of the
			// user, as RerankCandidates sees them (the causal view would hide
			// a turn's later questions).
			got, errs := batched.Pipeline.RetrieveBatch(t.Context(), reqs)
			full, ef := open()
			texts := make([]string, len(reqs))
			for i, r := range reqs {
				texts[i] = r.Query
			}
			cands, _ := full.SearchBatch(t.Context(), texts, cfg.Candidates)
			reranked := 0
			for i, r := range reqs {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				want, all, err := full.RerankCandidates(t.Context(), r, cands[i])
				if err != nil {
					t.Fatal(err)
				}
				if len(all) != len(cands[i]) {
					t.Errorf("request %d: RerankCandidates returned %d of %d candidates", i, len(all), len(cands[i]))
				}
				if !reflect.DeepEqual(got[i], want) {
					t.Errorf("request %d: pruned result\n%+v\nfull re-rank\n%+v", i, got[i], want)
				}
				if got[i].Trace.Reranked {
					reranked++
				}
			}
			if reranked != len(reqs) {
				t.Fatalf("%d of %d requests re-ranked: the test checks too little", reranked, len(reqs))
			}
			passages := func(e *prefetching) int {
				n := 0
				for _, s := range e.texts {
					if strings.HasPrefix(s, "title") { // a chunk's index text starts with its title
						n++
					}
				}
				return n
			}
			np, nf := passages(eb), passages(ef)
			t.Logf("w %v: %d passages embedded with pruning, %d without", w, np, nf)
			switch {
			case w == 0 && np != nf:
				t.Errorf("w 0: %d passages embedded, want all %d (nothing can be pruned)", np, nf)
			case w > 0 && (np == 0 || np >= nf):
				t.Errorf("w %v: %d passages embedded with pruning, want fewer than %d and more than 0", w, np, nf)
			}
		})
	}
}
