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
	out := slices.Clone(cands)
	if len(memVecs) == 0 {
		return out, nil
	}
	lo, hi := 0.0, 0.0
	for i, c := range cands {
		if i == 0 || c.Score < lo {
			lo = c.Score
		}
		if i == 0 || c.Score > hi {
			hi = c.Score
		}
	}
	for i := range out {
		mem := 0.0
		for _, h := range memVecs {
			mem += embedding.Cosine(candVecs[i], h)
		}
		mem /= float64(len(memVecs))
		score := mem
		if retrievalWeight > 0 {
			norm := 1.0
			if hi > lo {
				norm = (cands[i].Score - lo) / (hi - lo)
			}
			score = (1-retrievalWeight)*mem + retrievalWeight*norm
		}
		out[i].Score = score
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
	return out, nil
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
	return p.finish(ctx, m, r, cands, act)
}

// activation is the memory half of a request's second stage: the
// activated memories and whether they re-rank the candidates.
type activation struct {
	mems    []memory.Activated
	memVecs [][]float32
	rerank  bool // the most similar memory reaches cfg.Memory.RerankFloor
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
// reach the floor) and cuts the result to cfg.TopK, with its trace.
func (p *Pipeline) finish(ctx context.Context, m *memory.Store, r Request, cands []Ranked, act activation) (Result, []Ranked, error) {
	var res Result
	res.Trace.Candidates = make([]Scored, len(cands))
	for i, c := range cands {
		res.Trace.Candidates[i] = Scored{ID: c.ID, Score: c.Score}
	}
	res.Trace.Memories = act.mems
	final := cands
	if act.rerank {
		candVecs, err := p.candidateVectors(ctx, m.Embedder(), cands)
		if err != nil {
			return Result{}, nil, fmt.Errorf("embed candidates for memory: %w", err)
		}
		if final, err = Rerank(cands, candVecs, act.memVecs, p.cfg.Memory.RetrievalWeight); err != nil {
			return Result{}, nil, fmt.Errorf("memory re-rank: %w", err)
		}
		res.Trace.Reranked = true
	}
	res.Chunks = final[:min(p.cfg.TopK, len(final)):min(p.cfg.TopK, len(final))]
	res.Trace.Final = make([]Scored, len(res.Chunks))
	for i, c := range res.Chunks {
		res.Trace.Final[i] = Scored{ID: c.ID, Score: c.Score}
	}
	return res, final, nil
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
