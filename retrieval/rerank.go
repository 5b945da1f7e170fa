package retrieval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/himes-rl/himes/memory"

	"github.com/himes-rl/himes/embedding"
)

// Rerank is HiMeS's memory-aware re-ranking: score(c) = mean over h in H_n
// of cos(E(c), E(h)). With retrievalWeight w > 0 the final score is
// (1−w)·memory + w·retrieval, the retrieval score min–max normalized over the
// candidates (all-equal scores normalize to 1) — an ablation, off by
// default. Ties keep retrieval order. With no memories the candidates are
// returned unchanged, in retrieval order.
func Rerank(cands []Ranked, candVecs [][]float32, memVecs [][]float32, retrievalWeight float64) ([]Ranked, error) {
	if len(candVecs) != len(cands) {
		return nil, errors.New("rerank: one vector per candidate required")
	}
	if len(memVecs) == 0 {
		return slices.Clone(cands), nil
	}
	lo, hi := scoreRange(cands)
	return rerankIn(cands, candVecs, memVecs, retrievalWeight, lo, hi), nil
}

// scoreRange is the lowest and highest retrieval score of cands, the range
// Rerank normalizes them over.
func scoreRange(cands []Ranked) (lo, hi float64) {
	for i, c := range cands {
		if i == 0 || c.Score < lo {
			lo = c.Score
		}
		if i == 0 || c.Score > hi {
			hi = c.Score
		}
	}
	return lo, hi
}

// normalized is a retrieval score min–max normalized over [lo, hi] (all
// equal: 1).
func normalized(score, lo, hi float64) float64 {
	if hi > lo {
		return (score - lo) / (hi - lo)
	}
	return 1
}

// fusedScore is the score Rerank gives a candidate with retrieval score
// score and vector v.
func fusedScore(score float64, v []float32, memVecs [][]float32, w, lo, hi float64) float64 {
	mem := 0.0
	for _, h := range memVecs {
		mem += embedding.Cosine(v, h)
	}
	mem /= float64(len(memVecs))
	if w <= 0 {
		return mem
	}
	return (1-w)*mem + w*normalized(score, lo, hi)
}

// rerankIn is Rerank with the retrieval scores normalized over [lo, hi],
// which may be the range of a larger candidate list than cands.
func rerankIn(cands []Ranked, candVecs [][]float32, memVecs [][]float32, w, lo, hi float64) []Ranked {
	out := slices.Clone(cands)
	for i := range out {
		out[i].Score = fusedScore(cands[i].Score, candVecs[i], memVecs, w, lo, hi)
	}
	slices.SortStableFunc(out, func(a, b Ranked) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return 0
	})
	return out
}

// memoryBound is an upper bound on the memory term of any candidate:
// mean over h of cos(c, h) = ĉ·mean(ĥ) ≤ ‖mean(ĥ)‖ by Cauchy–Schwarz,
// whatever c is (a zero vector scores 0). The margin is far above the
// rounding of either side.
func memoryBound(memVecs [][]float32) float64 {
	mean := make([]float64, len(memVecs[0]))
	for _, h := range memVecs {
		var n float64
		for _, x := range h {
			n += float64(x) * float64(x)
		}
		if n == 0 {
			continue
		}
		n = math.Sqrt(n)
		for i, x := range h {
			mean[i] += float64(x) / n
		}
	}
	var sq float64
	for _, x := range mean {
		x /= float64(len(memVecs))
		sq += x * x
	}
	return math.Sqrt(sq) + 1e-9
}

// fusedMargin keeps a candidate whose bound falls short of the threshold
// by less than rounding could explain.
const fusedMargin = 1e-12

// reachable returns, in order, the indices of the candidates that can
// enter the top k of the fused re-rank; only they need a vector. The first
// k candidates are always kept, and the lowest of their fused scores, t, is
// a floor under the final k-th score: at least k candidates reach it. A
// later candidate's fused score is at most (1−w)·memoryBound +
// w·normalized(score), so one whose bound is below t ranks below k others
// and is never in the top k. headVecs are the first k candidates' vectors.
// The order within the kept candidates is the order the full re-rank gives
// them (a stable sort on the same scores), so the top k is the full
// re-rank's top k, scores and ties included (TestReachableKeepsTheTopK).
func reachable(cands []Ranked, headVecs [][]float32, memVecs [][]float32, w float64, k int) []int {
	if k >= len(cands) || w <= 0 || len(memVecs) == 0 {
		return allIndices(len(cands))
	}
	keep := allIndices(k)
	lo, hi := scoreRange(cands)
	t := math.Inf(1)
	for i := range k {
		t = min(t, fusedScore(cands[i].Score, headVecs[i], memVecs, w, lo, hi))
	}
	memMax := (1 - w) * memoryBound(memVecs)
	for i := k; i < len(cands); i++ {
		if memMax+w*normalized(cands[i].Score, lo, hi) >= t-fusedMargin {
			keep = append(keep, i)
		}
	}
	return keep
}

// RerankCandidates is the second stage of RetrieveAt on first-stage
// candidates (from SearchBatch with cfg.Candidates): memory activation and
// re-ranking. It also returns every candidate in its final order with its
// final score (the re-ranked scores when the memories re-ranked, else the
// retrieval order): what ablations compare rankings on.
func (p *Pipeline) RerankCandidates(ctx context.Context, r Request, cands []Ranked) (Result, []Ranked, error) {
	return p.rerankAll(ctx, r, cands)
}

// rerankAll activates the user's memories and re-ranks the candidates; it
// also returns all candidates in final order.
func (p *Pipeline) rerankAll(ctx context.Context, r Request, cands []Ranked) (Result, []Ranked, error) {
	m := p.mem.Load()
	act, err := p.activate(ctx, m, r, cands)
	if err != nil {
		return Result{}, nil, err
	}
	return p.finish(ctx, m, r, cands, act, true)
}

// activation is the memory half of a request's second stage: the
// activated memories and whether they re-rank the candidates.
type activation struct {
	mems    []memory.Activated
	memVecs [][]float32
	rerank  bool // the most similar memory reaches cfg.Memory.RerankFloor
	// keep are the candidates that can enter the top k (rerankKeep), when
	// already known; nil: finish works them out.
	keep []int
}

// activationText is the text request r activates memory m with, and
// whether memory takes part in its retrieval at all.
func (p *Pipeline) activationText(m *memory.Store, r Request, cands []Ranked) (string, bool) {
	if m == nil || !p.cfg.Memory.Enabled || len(cands) == 0 || strings.TrimSpace(r.Query) == "" || !m.HasUser(r.User) {
		return "", false
	}
	if p.cfg.Memory.ActivateWith == memory.ActivateWithRewrite && strings.TrimSpace(r.Rewrite) != "" {
		return r.Rewrite, true
	}
	return r.Query, true
}

// activate activates the user's memories (m, the pipeline's memory when
// the request began) for the request.
func (p *Pipeline) activate(ctx context.Context, m *memory.Store, r Request, cands []Ranked) (activation, error) {
	text, ok := p.activationText(m, r, cands)
	if !ok {
		return activation{}, nil
	}
	qv, err := m.Embedder().Embed(ctx, []string{text})
	if err != nil {
		return activation{}, fmt.Errorf("embed query for memory: %w", err)
	}
	mems, memVecs, err := m.ActivateAt(ctx, r.User, text, qv[0], r.Seq)
	if err != nil {
		return activation{}, fmt.Errorf("activate memories: %w", err)
	}
	best := math.Inf(-1)
	for _, mm := range mems {
		best = max(best, mm.Sim)
	}
	return activation{mems: mems, memVecs: memVecs, rerank: len(mems) > 0 && best >= p.cfg.Memory.RerankFloor}, nil
}

// finish re-ranks the candidates with the activation's memories (when they
// reach the floor) and cuts the result to cfg.TopK, with its trace. The
// ranking it also returns holds every candidate when all is set; otherwise
// only those that could reach the top k were embedded and re-ranked
// (rerankKeep), and it holds just those.
func (p *Pipeline) finish(ctx context.Context, m *memory.Store, r Request, cands []Ranked, act activation, all bool) (Result, []Ranked, error) {
	var res Result
	res.Trace.Candidates = make([]Scored, len(cands))
	for i, c := range cands {
		res.Trace.Candidates[i] = Scored{ID: c.ID, Score: c.Score}
	}
	res.Trace.Memories = act.mems
	final := cands
	if act.rerank {
		emb := m.Embedder()
		keep := act.keep // nil from rerankAll, which asks for all
		if keep == nil {
			var err error
			if keep, err = p.rerankKeep(ctx, emb, cands, act.memVecs, all); err != nil {
				return Result{}, nil, err
			}
		}
		kept := pick(cands, keep)
		candVecs, err := p.candidateVectors(ctx, emb, kept)
		if err != nil {
			return Result{}, nil, fmt.Errorf("embed candidates for memory: %w", err)
		}
		lo, hi := scoreRange(cands)
		final = rerankIn(kept, candVecs, act.memVecs, p.cfg.Memory.RetrievalWeight, lo, hi)
		res.Trace.Reranked = true
	}
	res.Chunks = final[:min(p.cfg.TopK, len(final)):min(p.cfg.TopK, len(final))]
	res.Trace.Final = make([]Scored, len(res.Chunks))
	for i, c := range res.Chunks {
		res.Trace.Final[i] = Scored{ID: c.ID, Score: c.Score}
	}
	return res, final, nil
}

// prunes reports whether the re-rank of cands embeds only the candidates
// that can reach the top k: the fused re-rank (retrieval_weight > 0), more
// candidates than k, and vectors that cost an embedding (no dense index in
// emb's space). A cold evaluation's time is almost all candidate
// embeddings; with top_k 3 of 100 candidates most of them cannot reach it.
func (p *Pipeline) prunes(emb embedding.Embedder, cands []Ranked) bool {
	free := p.service == nil && p.dense != nil && p.dense.name == emb.Name()
	return !free && p.cfg.Memory.RetrievalWeight > 0 && p.cfg.TopK < len(cands)
}

// rerankHead is the part of cands whose vectors rerankKeep needs first.
func (p *Pipeline) rerankHead(emb embedding.Embedder, cands []Ranked) []Ranked {
	if p.prunes(emb, cands) {
		return cands[:p.cfg.TopK]
	}
	return cands
}

// rerankKeep returns the indices of the candidates to embed and re-rank:
// all of them with all set or when nothing can be pruned, else those that
// can enter the top k (reachable), from the first k's vectors.
func (p *Pipeline) rerankKeep(ctx context.Context, emb embedding.Embedder, cands []Ranked, memVecs [][]float32, all bool) ([]int, error) {
	if all || !p.prunes(emb, cands) {
		return allIndices(len(cands)), nil
	}
	k := p.cfg.TopK
	head, err := p.candidateVectors(ctx, emb, cands[:k])
	if err != nil {
		return nil, fmt.Errorf("embed candidates for memory: %w", err)
	}
	return reachable(cands, head, memVecs, p.cfg.Memory.RetrievalWeight, k), nil
}

// allIndices is 0, 1, …, n−1.
func allIndices(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// pick is cands at the indices keep, in that order.
func pick(cands []Ranked, keep []int) []Ranked {
	out := make([]Ranked, len(keep))
	for j, i := range keep {
		out[j] = cands[i]
	}
	return out
}

// missingCandidateTexts are the texts of the candidates candidateVectors
// would embed now (no dense index in emb's space, not yet cached).
func (p *Pipeline) missingCandidateTexts(emb embedding.Embedder, cands []Ranked) []string {
	var out []string
	for _, c := range cands {
		switch {
		case p.service != nil:
			if _, ok := p.textVecs.Get(c.Chunk.IndexText()); !ok {
				out = append(out, c.Chunk.IndexText())
			}
		case p.dense != nil && p.dense.name == emb.Name():
			return nil
		default:
			if d, _ := p.chunkIndex(c.ID); p.chunkVecs[d].Load() == nil {
				out = append(out, c.Chunk.IndexText())
			}
		}
	}
	return out
}

// candidateVectors returns E(c) for candidates: from the dense index when
// there is one in the same space, else embedded now.
func (p *Pipeline) candidateVectors(ctx context.Context, emb embedding.Embedder, cands []Ranked) ([][]float32, error) {
	if p.service != nil {
		return p.serviceVectors(ctx, emb, cands)
	}
	out := make([][]float32, len(cands))
	if p.dense != nil && p.dense.name == emb.Name() {
		for i, c := range cands {
			d, _ := p.chunkIndex(c.ID)
			out[i] = p.dense.Vector(d)
		}
		return out, nil
	}
	var missing []int
	for i, c := range cands {
		d, _ := p.chunkIndex(c.ID)
		if v := p.chunkVecs[d].Load(); v != nil {
			out[i] = *v
		} else {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	texts := make([]string, len(missing))
	for j, i := range missing {
		texts[j] = cands[i].Chunk.IndexText()
	}
	vs, err := embedding.EmbedAs(ctx, emb, embedding.RolePassage, texts)
	if err != nil {
		return nil, fmt.Errorf("embed candidates: %w", err)
	}
	for j, i := range missing {
		out[i] = vs[j]
		d, _ := p.chunkIndex(cands[i].ID)
		p.chunkVecs[d].Store(&vs[j])
	}
	return out, nil
}

// serviceVectors embeds a service's chunks, cached by text: the service
// may return any document of a corpus the process never loaded.
func (p *Pipeline) serviceVectors(ctx context.Context, emb embedding.Embedder, cands []Ranked) ([][]float32, error) {
	out := make([][]float32, len(cands))
	var missing []int
	var texts []string
	for i, c := range cands {
		t := c.Chunk.IndexText()
		if v, ok := p.textVecs.Get(t); ok {
			out[i] = v
		} else {
			missing = append(missing, i)
			texts = append(texts, t)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	vs, err := embedding.EmbedAs(ctx, emb, embedding.RolePassage, texts)
	if err != nil {
		return nil, fmt.Errorf("embed candidates: %w", err)
	}
	for j, i := range missing {
		out[i] = vs[j]
		p.textVecs.Put(texts[j], vs[j])
	}
	return out, nil
}
