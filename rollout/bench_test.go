package rollout

// Benchmarks (run with -benchtime=1x; each iteration is a whole step):
//
//	go test -run '^$' -bench . -benchtime=1x ./rollout/
//
// BenchmarkResponderThroughput: achieved rollouts/s through the runner and the
// Ollama responder against an in-process fake Ollama with N slots and a fixed
// service time, as a fraction of the ideal N/service time.
//
// BenchmarkDedupShare: the share of responder calls saved on realistic steps
// (8 CAsT prompts × G=8 rewrites from a term-selection policy).

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/himes-rl/himes/internal/sharedtest"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/retrieval"
)

func BenchmarkResponderThroughput(b *testing.B) {
	const slots = 8
	const service = 50 * time.Millisecond
	for _, conc := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			f := newFakeOllama(b, slots, service, "tiny")
			cfg := DefaultConfig()
			cfg.Responder = "ollama"
			cfg.Concurrency = conc
			cfg.CacheSize = 0
			cfg.Ollama = testOllamaCfg(f.url())
			cfg.Ollama.MaxPerHost = conc
			o, err := NewOllama(cfg.Ollama, cfg.Prompt)
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			r, err := NewRunner(cfg, &uniqueRetriever{}, o, &fakeScorer{})
			if err != nil {
				b.Fatal(err)
			}
			n := max(4*conc, 512) // rollouts per step: enough rounds to reach steady state
			var rws []string
			for i := range n {
				rws = append(rws, fmt.Sprintf("rewrite %d", i))
			}
			var total time.Duration
			steps := 0
			for b.Loop() {
				t0 := time.Now()
				_, st, err := r.Run(context.Background(), steps, []Group{group("1", "q", rws...)})
				total += time.Since(t0)
				if err != nil || st.Failed != 0 || st.ResponderCalls != n {
					b.Fatalf("run: %v, stats %+v", err, st)
				}
				steps++
			}
			achieved := float64(n*steps) / total.Seconds()
			ideal := float64(slots) / service.Seconds()
			b.ReportMetric(achieved, "rollouts/s")
			b.ReportMetric(achieved/ideal, "frac_of_ideal")
		})
	}
}

// BenchmarkRolloutOverhead is the client-side cost of one rollout through the
// runner and the Ollama responder (HTTP on loopback to a zero-latency fake):
// it bounds how far a closed loop with concurrency = server slots falls
// short of the ideal (service / (service + overhead)).
func BenchmarkRolloutOverhead(b *testing.B) {
	f := newFakeOllama(b, 1, 0, "tiny")
	cfg := DefaultConfig()
	cfg.Concurrency = 1
	cfg.CacheSize = 0
	o, err := NewOllama(testOllamaCfg(f.url()), cfg.Prompt)
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	r, err := NewRunner(cfg, &uniqueRetriever{}, o, &fakeScorer{})
	if err != nil {
		b.Fatal(err)
	}
	g := []Group{group("1", "q", "only rewrite")}
	for b.Loop() {
		if _, st, err := r.Run(context.Background(), 0, g); err != nil || st.Failed != 0 {
			b.Fatal(err, st)
		}
	}
}

func BenchmarkDedupShare(b *testing.B) {
	data := sharedtest.SharedDir(b)
	turns := loadTurns(b, filepath.Join(data, "conversations", "cast2020.jsonl"))
	var eligible []datasets.Turn
	for _, t := range turns {
		if len(t.History) >= 2 && t.Question != "" {
			eligible = append(eligible, t)
		}
	}
	ret := newMiniBM25(b, filepath.Join(data, "kb", "passages.jsonl"), 3)
	stop := NewExtractive(ExtractiveConfig{}).stop
	// scale is the spread of the policy's per-term logits: 0 is an untrained
	// policy (every term a coin flip), 3 a confident, partly trained one.
	for _, scale := range []float64{0, 1.5, 3} {
		b.Run(fmt.Sprintf("logit_scale=%g", scale), func(b *testing.B) {
			var rollouts, dedup, calls int
			for b.Loop() {
				rng := rand.New(rand.NewPCG(1, uint64(scale*10)))
				for step := range 10 {
					groups := termSelectionStep(rng, eligible, stop, 8, 8, scale)
					r, err := NewRunner(DefaultConfig(), ret, NewExtractive(ExtractiveConfig{}), &fakeScorer{})
					if err != nil {
						b.Fatal(err)
					}
					_, st, err := r.Run(context.Background(), step, groups)
					if err != nil {
						b.Fatal(err)
					}
					rollouts += st.Rollouts
					dedup += st.DedupHits
					calls += st.ResponderCalls
				}
			}
			b.ReportMetric(float64(dedup)/float64(rollouts), "dedup_saved")
			b.ReportMetric(1-float64(calls)/float64(rollouts), "calls_saved")
		})
	}
}

// termSelectionStep samples prompts and, per prompt, G rewrites "question +
// selected history terms", each term kept with probability sigmoid(logit),
// logits ~ N(0, scale²) fixed per prompt: the shape of a term-selection policy.
func termSelectionStep(rng *rand.Rand, turns []datasets.Turn, stop map[string]bool, prompts, g int, scale float64) []Group {
	var groups []Group
	for p := range prompts {
		t := turns[rng.IntN(len(turns))]
		inQ := map[string]bool{}
		for _, w := range contentWords(t.Question, stop) {
			inQ[w] = true
		}
		var terms []string
		seen := map[string]bool{}
		for _, m := range t.History {
			if m.Role != "user" {
				continue
			}
			for _, w := range contentWords(m.Text, stop) {
				if !inQ[w] && !seen[w] {
					seen[w] = true
					terms = append(terms, w)
				}
			}
		}
		logits := make([]float64, len(terms))
		for i := range logits {
			logits[i] = rng.NormFloat64() * scale
		}
		grp := Group{PromptID: fmt.Sprint(p), Turn: t}
		for s := range g {
			var sel []string
			for i, w := range terms {
				if rng.Float64() < 1/(1+math.Exp(-logits[i])) {
					sel = append(sel, w)
				}
			}
			grp.Samples = append(grp.Samples, Sample{Index: s, Rewrite: strings.TrimSpace(t.Question + " " + strings.Join(sel, " "))})
		}
		groups = append(groups, grp)
	}
	return groups
}

func loadTurns(tb testing.TB, path string) []datasets.Turn {
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []datasets.Turn
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var t datasets.Turn
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			tb.Fatalf("%s:%d: %v", path, line, err)
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// miniBM25 is a small Lucene-BM25 retriever (k1 0.9, b 0.4) over the shared
// knowledge base, so the benchmark sees realistic chunk overlap between rewrites.
type miniBM25 struct {
	ids, texts []string
	postings   map[string][]posting
	docLen     []float64
	avgLen     float64
	k          int
}

type posting struct {
	doc int
	tf  float64
}

func bm25Tokens(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	})
}

func newMiniBM25(tb testing.TB, path string, k int) *miniBM25 {
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	m := &miniBM25{postings: map[string][]posting{}, k: k}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var p struct{ ID, Title, Text string }
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			tb.Fatal(err)
		}
		doc := len(m.ids)
		m.ids, m.texts = append(m.ids, p.ID), append(m.texts, p.Text)
		tf := map[string]float64{}
		toks := bm25Tokens(p.Title + " " + p.Text)
		for _, w := range toks {
			tf[w]++
		}
		for w, c := range tf {
			m.postings[w] = append(m.postings[w], posting{doc, c})
		}
		m.docLen = append(m.docLen, float64(len(toks)))
		m.avgLen += float64(len(toks))
	}
	m.avgLen /= float64(len(m.ids))
	return m
}

func (m *miniBM25) Retrieve(_ context.Context, _, rewrite, _ string) (retrieval.Result, error) {
	n := float64(len(m.ids))
	score := map[int]float64{}
	for _, w := range bm25Tokens(rewrite) {
		ps := m.postings[w]
		idf := math.Log(1 + (n-float64(len(ps))+0.5)/(float64(len(ps))+0.5))
		for _, p := range ps {
			score[p.doc] += idf * p.tf / (p.tf + 0.9*(1-0.4+0.4*m.docLen[p.doc]/m.avgLen))
		}
	}
	docs := make([]int, 0, len(score))
	for d := range score {
		docs = append(docs, d)
	}
	slices.SortFunc(docs, func(a, b int) int {
		if c := cmp.Compare(score[b], score[a]); c != 0 {
			return c
		}
		return cmp.Compare(m.ids[b], m.ids[a])
	})
	var res retrieval.Result
	for _, d := range docs[:min(m.k, len(docs))] {
		res.Chunks = append(res.Chunks, retrieval.Ranked{Chunk: retrieval.Chunk{ID: m.ids[d], PassageID: m.ids[d], Text: m.texts[d]}, Score: score[d]})
	}
	return res, nil
}
