package embedded

// Term-scorer experiments behind README's "Does the rewriter transfer?":
// what a scorer over the embedded policy's candidates and features can reach
// on the four shared judged collections, leave one collection out, without
// the training loop (full-batch Adam on the candidates of every turn with a
// human rewrite; greedy keep when the logit clears a threshold). Opt-in, as
// it retrieves ~10^5 queries:
//
//	HIMES_TERM_EXPERIMENTS=all go test -run TestTermScorerExperiments -v -timeout 60m ./trainer/embedded/
//
// Modes (comma-separated; "all" is every one): lr (the logistic regression
// the policy is), mlp (one hidden layer), prf (pseudo-relevance features),
// stem (labels by stem), util (labels by retrieval utility), coh
// (query-coherence features), prev (earlier turns' human rewrites in place of
// their questions), bounds (oracle selection, the known-count and the
// perfect-gate bounds). Each line prints the share of the raw → human
// Recall@10 gap closed on CAsT 2020/2021/2022/MTRAG.

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate/ir"
	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/trainer"
)

var expCollections = []string{"cast2020", "cast2021", "cast2022", "mtrag_human_eval_subset"}

// expTurn is one judged turn with a human rewrite and its candidates.
type expTurn struct {
	coll              int
	question          string
	cands             []candidate
	human, stem       []float64 // labels: the term is in the human rewrite (as a token; as a stem)
	utility           []float64 // Recall@10 + RR gain of question + the term alone
	prf, coh          [][]float64
	qrels             map[string]int
	raw, gold, oracle float64 // Recall@10 of the question, the human rewrite, the oracle selection
}

type expScorer func(x *expTurn) []float64
type expFeatures func(x *expTurn, k int) []float64
type expLabel func(x *expTurn, k int) float64

func baseFeatures(x *expTurn, k int) []float64 { return x.cands[k].phi[:] }
func humanLabel(x *expTurn, k int) float64     { return x.human[k] }

func withExtra(extra func(x *expTurn) [][]float64) expFeatures {
	return func(x *expTurn, k int) []float64 {
		return append(append([]float64(nil), x.cands[k].phi[:]...), extra(x)[k]...)
	}
}

type expEnv struct {
	ctx   context.Context
	p     *retrieval.Pipeline
	turns []expTurn
}

func (e *expEnv) run(text string) []retrieval.Scored {
	res, err := e.p.Retrieve(e.ctx, "", text, text)
	if err != nil {
		panic(err)
	}
	return retrieval.PassageRanking(res)
}

func (e *expEnv) recall(text string, q map[string]int) float64 {
	return ir.Recall(e.run(text), q, 10)
}

// loadExperiment reads the four collections over the shared KB. prev puts
// the human rewrites of earlier turns in place of their questions; util and
// coh compute those (retrieval-heavy) extras.
func loadExperiment(t *testing.T, prev, util, coh bool) *expEnv {
	shared := sharedtest.SharedDir(t)
	cfg := retrieval.DefaultConfig()
	cfg.Method, cfg.TopK, cfg.Candidates = "bm25", 3, 20
	e := &expEnv{ctx: context.Background()}
	var err error
	if e.p, err = retrieval.Open(e.ctx, cfg, filepath.Join(shared, "kb", "passages.jsonl")); err != nil {
		t.Fatal(err)
	}
	r, err := datasets.NewRenderer(datasets.DefaultPromptConfig())
	if err != nil {
		t.Fatal(err)
	}
	for ci, name := range expCollections {
		turns, _, err := datasets.LoadContext(t.Context(), filepath.Join(shared, "conversations", name+".jsonl"), datasets.LoadOptions{UserField: "conv_id"})
		if err != nil {
			t.Fatal(err)
		}
		rewriteOf := map[string]string{}
		for _, tu := range turns {
			if tu.HasRewrite() {
				rewriteOf[tu.ConvID+"\x00"+strings.TrimSpace(tu.Question)] = *tu.Rewrite
			}
		}
		for _, tu := range turns {
			if !tu.HasRewrite() || len(tu.Passages) == 0 {
				continue
			}
			if prev {
				h := slices.Clone(tu.History)
				for j, m := range h {
					if rw, ok := rewriteOf[tu.ConvID+"\x00"+strings.TrimSpace(m.Text)]; ok && m.Role == "user" {
						h[j].Text = rw
					}
				}
				tu.History = h
			}
			e.turns = append(e.turns, e.turn(t, r, ci, tu, util, coh))
		}
	}
	return e
}

func (e *expEnv) turn(t *testing.T, r *datasets.Renderer, coll int, tu datasets.Turn, util, coh bool) expTurn {
	pr, err := r.Render(tu)
	if err != nil {
		t.Fatal(err)
	}
	cands, _ := candidates(contextOf(trainer.PromptFromRendered(tu.ID(), pr)), e.p, 64)
	x := expTurn{coll: coll, question: strings.TrimSpace(tu.Question), cands: cands, qrels: tu.Qrels()}
	inRewrite, stems := map[string]bool{}, map[string]bool{}
	for _, w := range Tokens(*tu.Rewrite) {
		inRewrite[w] = true
	}
	for _, w := range e.p.Tokenize(*tu.Rewrite) {
		stems[w] = true
	}
	var kept []candidate
	for _, c := range cands {
		x.human = append(x.human, b2f(inRewrite[c.term]))
		toks := e.p.Tokenize(c.term)
		all := len(toks) > 0
		for _, w := range toks {
			all = all && stems[w]
		}
		x.stem = append(x.stem, b2f(all))
		if inRewrite[c.term] {
			kept = append(kept, c)
		}
	}
	x.raw, x.gold = e.recall(x.question, x.qrels), e.recall(*tu.Rewrite, x.qrels)
	x.oracle = e.recall(rewriteText(x.question, kept), x.qrels)
	// Pseudo-relevance: how often (rank-discounted) the term occurs in the
	// top 10 for the question, the user turns + question, the last user
	// turn + question.
	var users []string
	for _, m := range tu.History {
		if m.Role == "user" {
			users = append(users, m.Text)
		}
	}
	last := ""
	if len(users) > 0 {
		last = users[len(users)-1]
	}
	x.prf = make([][]float64, len(cands))
	for _, q := range []string{x.question, strings.Join(append(users, x.question), " "), last + " " + x.question} {
		hits, err := e.p.Search(e.ctx, q, 10)
		if err != nil {
			t.Fatal(err)
		}
		weight := map[string]float64{}
		for rank, h := range hits {
			seen := map[string]bool{}
			for _, w := range Tokens(h.Text) {
				if !seen[w] {
					seen[w] = true
					weight[w] += 1 / math.Log2(float64(rank)+2)
				}
			}
		}
		for k, c := range cands {
			x.prf[k] = append(x.prf[k], weight[c.term]/4.5)
		}
	}
	if util {
		metric := func(text string) float64 {
			run := e.run(text)
			return ir.Recall(run, x.qrels, 10) + ir.RecipRank(run, x.qrels)
		}
		base := metric(x.question)
		for _, c := range cands {
			x.utility = append(x.utility, metric(x.question+" "+c.term)-base)
		}
	}
	if coh {
		x.coh = e.coherence(t, x.question, cands)
	}
	return x
}

// coherence: for question + term, the top score against the question's and
// the term's own (do they point at the same documents?), the share of the
// top 5 holding the term, and the overlap of the top 10 with the question's.
func (e *expEnv) coherence(t *testing.T, q string, cands []candidate) [][]float64 {
	top := func(text string) ([]retrieval.Ranked, float64) {
		res, err := e.p.Search(e.ctx, text, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) == 0 {
			return nil, 0
		}
		return res, res[0].Score
	}
	rq, sq := top(q)
	inQ := map[string]bool{}
	for _, r := range rq {
		inQ[r.ID] = true
	}
	out := make([][]float64, len(cands))
	for k, c := range cands {
		rqt, sqt := top(q + " " + c.term)
		_, st := top(c.term)
		ratio := 0.0
		if sq+st > 0 {
			ratio = sqt / (sq + st)
		}
		var holds, overlap float64
		for j, r := range rqt {
			if j < 5 && slices.Contains(Tokens(r.Text), c.term) {
				holds += 0.2
			}
			if inQ[r.ID] {
				overlap += 0.1
			}
		}
		out[k] = []float64{ratio, holds, overlap}
	}
	return out
}

// design gathers the training rows of every collection but hold, and the
// standardization of each column.
func (e *expEnv) design(hold int, feat expFeatures, label expLabel) (X [][]float64, Y, mu, sd []float64) {
	for i := range e.turns {
		x := &e.turns[i]
		if x.coll == hold {
			continue
		}
		for k := range x.cands {
			X = append(X, feat(x, k))
			Y = append(Y, label(x, k))
		}
	}
	d := len(X[0])
	mu, sd = make([]float64, d), make([]float64, d)
	for _, row := range X {
		for j, v := range row {
			mu[j] += v / float64(len(X))
		}
	}
	for _, row := range X {
		for j, v := range row {
			sd[j] += (v - mu[j]) * (v - mu[j]) / float64(len(X))
		}
	}
	for j := range sd {
		if sd[j] = math.Sqrt(sd[j]); sd[j] < 1e-9 {
			sd[j] = 1
		}
	}
	return X, Y, mu, sd
}

// adam is full-batch Adam over θ with gradient g at step ep (1-based).
func adam(theta, g, m, v []float64, ep int, lr float64) {
	for j := range theta {
		m[j] = 0.9*m[j] + 0.1*g[j]
		v[j] = 0.999*v[j] + 0.001*g[j]*g[j]
		mh := m[j] / (1 - math.Pow(0.9, float64(ep)))
		vh := v[j] / (1 - math.Pow(0.999, float64(ep)))
		theta[j] -= lr * mh / (math.Sqrt(vh) + 1e-8)
	}
}

// logistic trains the policy's own model (keep class weighted pos).
func (e *expEnv) logistic(hold int, feat expFeatures, label expLabel, pos float64) expScorer {
	X, Y, mu, sd := e.design(hold, feat, label)
	d := len(mu)
	w, m, v := make([]float64, d+1), make([]float64, d+1), make([]float64, d+1)
	for ep := 1; ep <= 300; ep++ {
		g := make([]float64, d+1)
		for i, row := range X {
			z := w[d]
			for j := range row {
				z += w[j] * (row[j] - mu[j]) / sd[j]
			}
			_, dz := weightedBCE(z, Y[i], pos)
			for j := range row {
				g[j] += dz * (row[j] - mu[j]) / sd[j] / float64(len(X))
			}
			g[d] += dz / float64(len(X))
		}
		adam(w, g, m, v, ep, 0.05)
	}
	return func(x *expTurn) []float64 {
		z := make([]float64, len(x.cands))
		for k := range x.cands {
			row := feat(x, k)
			z[k] = w[d]
			for j := range row {
				z[k] += w[j] * (row[j] - mu[j]) / sd[j]
			}
		}
		return z
	}
}

// mlp trains one hidden layer of tanh units on the same loss.
func (e *expEnv) mlp(hold int, feat expFeatures, label expLabel, pos float64, hidden int) expScorer {
	X, Y, mu, sd := e.design(hold, feat, label)
	d := len(mu)
	rng := rand.New(rand.NewPCG(1, 7))
	out := hidden * (d + 1) // output weights start here; the last one is its bias
	P := out + hidden + 1
	th := make([]float64, P)
	for i := range out {
		th[i] = rng.NormFloat64() / math.Sqrt(float64(d))
	}
	for i := range hidden {
		th[out+i] = rng.NormFloat64() / math.Sqrt(float64(hidden))
	}
	forward := func(row []float64, h []float64) float64 {
		z := th[P-1]
		for u := range hidden {
			a := th[u*(d+1)+d]
			for j := range d {
				a += th[u*(d+1)+j] * (row[j] - mu[j]) / sd[j]
			}
			h[u] = math.Tanh(a)
			z += th[out+u] * h[u]
		}
		return z
	}
	m, v, h := make([]float64, P), make([]float64, P), make([]float64, hidden)
	for ep := 1; ep <= 300; ep++ {
		g := make([]float64, P)
		for i, row := range X {
			_, dz := weightedBCE(forward(row, h), Y[i], pos)
			dz /= float64(len(X))
			g[P-1] += dz
			for u := range hidden {
				g[out+u] += dz * h[u]
				da := dz * th[out+u] * (1 - h[u]*h[u])
				for j := range d {
					g[u*(d+1)+j] += da * (row[j] - mu[j]) / sd[j]
				}
				g[u*(d+1)+d] += da
			}
		}
		for j := range g {
			g[j] += 1e-4 * th[j]
		}
		adam(th, g, m, v, ep, 0.02)
	}
	return func(x *expTurn) []float64 {
		z := make([]float64, len(x.cands))
		for k := range x.cands {
			z[k] = forward(feat(x, k), h)
		}
		return z
	}
}

// gap is the share of the raw → human gap closed on one collection by
// keep, a choice of candidates per turn.
func (e *expEnv) gap(coll int, keep func(x *expTurn) []candidate) float64 {
	var got, raw, gold float64
	for i := range e.turns {
		x := &e.turns[i]
		if x.coll != coll {
			continue
		}
		got += e.recall(rewriteText(x.question, keep(x)), x.qrels)
		raw += x.raw
		gold += x.gold
	}
	return (got - raw) / (gold - raw)
}

func aboveThreshold(z []float64, cands []candidate, thr float64) []candidate {
	var kept []candidate
	for k, c := range cands {
		if z[k] > thr {
			kept = append(kept, c)
		}
	}
	return kept
}

// report prints one line per keep threshold: the gap closed per collection
// by the scorer trained without it.
func (e *expEnv) report(name string, train func(hold int) expScorer) {
	scorers := make([]expScorer, len(expCollections))
	for c := range expCollections {
		scorers[c] = train(c)
	}
	for _, thr := range []float64{-0.5, 0, 0.5} {
		var parts []string
		for c := range expCollections {
			s := scorers[c]
			parts = append(parts, fmt.Sprintf("%4.0f%%", 100*e.gap(c, func(x *expTurn) []candidate { return aboveThreshold(s(x), x.cands, thr) })))
		}
		fmt.Printf("%-34s threshold %+.1f: %s\n", name, thr, strings.Join(parts, " "))
	}
}

func TestTermScorerExperiments(t *testing.T) {
	spec := os.Getenv("HIMES_TERM_EXPERIMENTS")
	if spec == "" {
		t.Skip("opt-in: HIMES_TERM_EXPERIMENTS=all (or lr,mlp,prf,stem,util,coh,prev,bounds) runs the term-scorer experiments")
	}
	on := func(mode string) bool { return spec == "all" || slices.Contains(strings.Split(spec, ","), mode) }
	if on("prev") {
		e := loadExperiment(t, true, false, false)
		e.report("lr, earlier turns' rewrites", func(h int) expScorer { return e.logistic(h, baseFeatures, humanLabel, 5) })
	}
	e := loadExperiment(t, false, on("util"), on("coh"))
	if on("lr") {
		e.report("lr (the policy's model)", func(h int) expScorer { return e.logistic(h, baseFeatures, humanLabel, 5) })
	}
	if on("mlp") {
		e.report("mlp, 16 tanh units", func(h int) expScorer { return e.mlp(h, baseFeatures, humanLabel, 5, 16) })
	}
	if on("prf") {
		f := withExtra(func(x *expTurn) [][]float64 { return x.prf })
		e.report("lr + pseudo-relevance", func(h int) expScorer { return e.logistic(h, f, humanLabel, 5) })
	}
	if on("stem") {
		stem := func(x *expTurn, k int) float64 { return x.stem[k] }
		e.report("lr, stem labels", func(h int) expScorer { return e.logistic(h, baseFeatures, stem, 5) })
	}
	if on("util") {
		for _, pos := range []float64{3, 5, 10} {
			useful := func(x *expTurn, k int) float64 { return b2f(x.utility[k] > 0.05) }
			e.report(fmt.Sprintf("lr, utility labels, pos %.0f", pos), func(h int) expScorer { return e.logistic(h, baseFeatures, useful, pos) })
		}
	}
	if on("coh") {
		f := withExtra(func(x *expTurn) [][]float64 { return x.coh })
		e.report("lr + coherence", func(h int) expScorer { return e.logistic(h, f, humanLabel, 5) })
		e.report("mlp + coherence", func(h int) expScorer { return e.mlp(h, f, humanLabel, 5, 16) })
	}
	if on("bounds") {
		e.bounds()
	}
}

// bounds prints the oracle selection, the scorer's top n when n (the human's
// count) is known, and the scorer behind a perfect "needs any term" gate.
func (e *expEnv) bounds() {
	var oracle, known, gated []string
	for c := range expCollections {
		var o, raw, gold float64
		for _, x := range e.turns {
			if x.coll == c {
				o, raw, gold = o+x.oracle, raw+x.raw, gold+x.gold
			}
		}
		oracle = append(oracle, fmt.Sprintf("%4.0f%%", 100*(o-raw)/(gold-raw)))
		s := e.logistic(c, baseFeatures, humanLabel, 5)
		known = append(known, fmt.Sprintf("%4.0f%%", 100*e.gap(c, func(x *expTurn) []candidate {
			z := s(x)
			order := make([]int, len(z))
			for k := range order {
				order[k] = k
			}
			slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(z[b], z[a]) })
			n := 0
			for _, y := range x.human {
				n += int(y)
			}
			var kept []candidate
			for _, k := range order[:n] {
				kept = append(kept, x.cands[k])
			}
			return kept
		})))
		gated = append(gated, fmt.Sprintf("%4.0f%%", 100*e.gap(c, func(x *expTurn) []candidate {
			if !slices.Contains(x.human, 1) {
				return nil
			}
			return aboveThreshold(s(x), x.cands, -0.5)
		})))
	}
	fmt.Printf("%-34s %s\n", "oracle selection", strings.Join(oracle, " "))
	fmt.Printf("%-34s %s\n", "lr top-n, n = the human's count", strings.Join(known, " "))
	fmt.Printf("%-34s %s\n", "lr behind a perfect gate (−0.5)", strings.Join(gated, " "))
}
