package evaluate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/himes-rl/himes/internal/stats"

	"golang.org/x/sync/errgroup"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/retrieval"
)

// Responder answers the user's question from the retrieved chunks;
// rollout.Responder implements it.
type Responder interface {
	Name() string
	Respond(ctx context.Context, question string, chunks []retrieval.Ranked) (string, error)
}

// Scorer computes the HSER reward and its terms; *hser.Scorer implements it.
type Scorer interface {
	// ScoreMulti scores against every reference answer of a turn (the best
	// match counts; hser.Scorer.ScoreMulti).
	ScoreMulti(prediction string, references []string, context []string) hser.Score
	// WithRetrieval adds a judged turn's retrieval terms (rank, Recall@k,
	// NDCG@k, RR of its ranking) to its score, as a rollout's.
	WithRetrieval(s hser.Score, ranking []string, qrels map[string]int) hser.Score
}

// System is one evaluated configuration: a rewriter with long-term memory on
// or off. Each system needs its own Retriever when memory is on, since the
// memory of a user grows with the queries it sees.
type System struct {
	Name     string
	Rewriter Rewriter
	Memory   bool
	// Variant names the memory variant (memory.Config.Variant)
	// when Memory is on; "" is the config's own setting.
	Variant   string
	Retriever retrieval.Retriever
	// Checkpoint says which policy checkpoint the rewriter is (e.g. "best:
	// step 275, eval.policy.recall_10 0.4390"); "" for rewriters that are no
	// checkpoint. Every output line of the system shows it.
	Checkpoint string
}

// Options tunes an evaluation.
type Options struct {
	// Concurrency bounds the conversations in flight (turns of one
	// conversation run in order) and the rewrites in flight before a batch
	// retrieval (retrieval.BatchRetriever: every turn of its systems in one
	// call; long-term memory is causal by position, not by call order).
	Concurrency int
	Stats       stats.Config
	// Baseline names the rewriter every system is compared with ("raw").
	Baseline string
	// Progress, when set, is called after each turn with done and total,
	// never concurrently.
	Progress func(done, total int)
}

// Metric names, in table order.
const (
	MReward    = "reward"
	MRougeF1   = "rougeL_f1"
	MEM        = "em"
	MHit       = "hit"
	MSquadEM   = "squad_em"
	MSquadF1   = "squad_f1"
	MMRR       = "recip_rank"
	MNDCG3     = "ndcg_cut_3"
	MRecall10  = "recall_10"
	MRecall100 = "recall_100"
	// Activation against labelled relevant memories, over the turns with
	// labels, memory-on systems only: |A∩R|/|A|, |A∩R|/|R| and 1/rank of the
	// first relevant memory, A the activated memories (at most
	// retrieval.memory.top_n), R the labelled ones. A turn that activates
	// nothing has precision 0.
	MMemPrecision = "memory_precision"
	MMemRecall    = "memory_recall"
	MMemMRR       = "memory_mrr"
)

// AnswerMetrics need a reference answer; IRMetrics need gold passages.
var (
	AnswerMetrics = []string{MReward, MRougeF1, MEM, MHit, MSquadEM, MSquadF1}
	IRMetrics     = []string{MMRR, MNDCG3, MRecall10, MRecall100}
	MemoryMetrics = []string{MMemPrecision, MMemRecall, MMemMRR}
)

// allMetrics are the metrics of the report, in table order.
func allMetrics() []string {
	return slices.Concat(AnswerMetrics, IRMetrics, MemoryMetrics)
}

// TurnResult is one system on one turn: a row of the per-turn Parquet.
type TurnResult struct {
	System    string
	Rewriter  string
	Memory    bool
	ConvID    string
	Turn      int
	Question  string
	Rewrite   string
	Answer    string
	Reference string
	// Error and ErrorStage (rewrite, retrieve, respond) are set on failure.
	Error      string
	ErrorStage string
	Score      hser.Score
	// HasAnswer: the turn has a reference answer and was answered.
	HasAnswer bool
	// HasGold: the turn has judged passages and retrieval succeeded.
	HasGold                               bool
	RecipRank, NDCG3, Recall10, Recall100 float64
	// Run is the passage ranking the IR metrics were computed on.
	Run      []retrieval.Scored
	Memories []string
	// MemoryIDs are the activated memories' ids, in activation order.
	MemoryIDs []string
	// Reranked: the activated memories re-ranked the candidates (the most
	// similar reached retrieval.memory.rerank_floor).
	Reranked bool
	// HasMemoryLabels: memory was on, the turn has labelled relevant
	// memories, and retrieval succeeded.
	HasMemoryLabels                 bool
	MemPrecision, MemRecall, MemMRR float64
	Seconds                         float64
}

// metric returns the value of a metric, NaN when it does not apply.
func (r *TurnResult) metric(name string) float64 {
	switch name {
	case MMemPrecision, MMemRecall, MMemMRR:
		if !r.HasMemoryLabels {
			return math.NaN()
		}
		return map[string]float64{MMemPrecision: r.MemPrecision, MMemRecall: r.MemRecall, MMemMRR: r.MemMRR}[name]
	case MMRR, MNDCG3, MRecall10, MRecall100:
		if !r.HasGold {
			return math.NaN()
		}
		return map[string]float64{MMRR: r.RecipRank, MNDCG3: r.NDCG3, MRecall10: r.Recall10, MRecall100: r.Recall100}[name]
	}
	if !r.HasAnswer {
		return math.NaN()
	}
	switch name {
	case MReward:
		return r.Score.Reward
	case MRougeF1:
		return r.Score.RougeF1
	case MEM:
		return r.Score.EM
	case MHit:
		return r.Score.Hit
	case MSquadEM:
		return r.Score.SquadEM
	case MSquadF1:
		return r.Score.SquadF1
	}
	return math.NaN()
}

// SystemReport is the summary of one system.
type SystemReport struct {
	Name string `json:"name"`
	// Checkpoint is System.Checkpoint; absent when the system is no checkpoint.
	Checkpoint string `json:"checkpoint,omitempty"`
	Rewriter   string `json:"rewriter"`
	Memory     bool   `json:"memory"`
	Turns      int    `json:"turns"`
	Failed     int    `json:"failed"`
	// Failures counts failed turns by stage (rewrite, retrieve, respond).
	Failures map[string]int `json:"failures"`
	// Metrics: mean over turns with a 95% cluster-bootstrap interval; a
	// metric is absent when no turn has what it needs.
	Metrics map[string]stats.Estimate `json:"metrics"`
	// Baseline is the system compared against (raw with the same memory
	// setting); VsBaseline the paired comparisons, absent for the baseline.
	Baseline   string                      `json:"baseline,omitempty"`
	VsBaseline map[string]stats.Comparison `json:"vs_baseline,omitempty"`
	// VsMemoryOff compares a memory-on system with the same rewriter without
	// memory, when both were evaluated.
	VsMemoryOff map[string]stats.Comparison `json:"vs_memory_off,omitempty"`
	// RunDepth is the largest number of passages ranked for a turn: the
	// depth Recall@100 was computed at.
	RunDepth int `json:"run_depth"`
	// MemoryTurns counts turns where long-term memory activated at least one
	// historical query (it can only re-rank those).
	MemoryTurns int `json:"memory_turns"`
	// RerankedTurns counts the turns whose candidates the memories
	// re-ranked: activation alone changes no ranking.
	RerankedTurns int `json:"reranked_turns"`
}

// Report is a whole evaluation.
type Report struct {
	Turns         int    `json:"turns"`
	Conversations int    `json:"conversations"`
	WithAnswer    int    `json:"turns_with_reference_answer"`
	WithGold      int    `json:"turns_with_judged_passages"`
	Responder     string `json:"responder"`
	// EMNormalization names the normalization of the reward's EM ("em"):
	// "unicode" or "squad" (hser.Config.EMNormalization); "" when the scorer
	// does not say. squad_em and squad_f1 are always SQuAD v1.1's.
	EMNormalization string `json:"em_normalization"`
	// Retrieval says what retrieved for every system (filled by the
	// caller, which holds the pipeline; zero when it does not say).
	Retrieval RetrievalInfo  `json:"retrieval"`
	Stats     stats.Config   `json:"stats"`
	Systems   []SystemReport `json:"systems"`
	Seconds   float64        `json:"seconds"`
	// TrainingConversations counts the evaluated conversations that the
	// run's own training data holds (filled by the caller for data given in
	// place of the held-out split): their turns are not held out.
	TrainingConversations int `json:"training_conversations,omitempty"`
}

// RetrievalInfo identifies the retrieval of an evaluation, so that two
// folders made with different settings never read alike.
type RetrievalInfo struct {
	Method     string `json:"method"`
	TopK       int    `json:"top_k"`
	Candidates int    `json:"candidates"`
	// Embedder is the dense first stage's embedder, fingerprinted (""
	// for bm25 or a retrieval service).
	Embedder string `json:"embedder,omitempty"`
	// MemoryEmbedder is the long-term memory's embedder, fingerprinted,
	// when a system evaluated with memory ("" otherwise).
	MemoryEmbedder string `json:"memory_embedder,omitempty"`
}

// Evaluate runs every system over the turns and summarizes. Per-turn
// failures are recorded in the results and counted in the report, never
// dropped; only a cancelled context stops the evaluation.
func Evaluate(ctx context.Context, turns []datasets.Turn, systems []System, resp Responder, scorer Scorer, opts Options) (Report, [][]TurnResult, error) {
	t0 := time.Now()
	if len(turns) == 0 {
		return Report{}, nil, errors.New("evaluate: no turns")
	}
	if len(systems) == 0 {
		return Report{}, nil, errors.New("evaluate: no systems")
	}
	if opts.Concurrency < 1 {
		opts.Concurrency = 1
	}
	if opts.Baseline == "" {
		opts.Baseline = "raw"
	}
	if err := opts.Stats.Validate(); err != nil {
		return Report{}, nil, err
	}
	names := map[string]bool{}
	for _, s := range systems {
		if names[s.Name] {
			return Report{}, nil, fmt.Errorf("evaluate: system %q given twice", s.Name)
		}
		names[s.Name] = true
		if s.Retriever == nil || s.Rewriter == nil {
			return Report{}, nil, fmt.Errorf("evaluate: system %q lacks a rewriter or retriever", s.Name)
		}
	}
	convs := Conversations(turns)

	results := make([][]TurnResult, len(systems))
	for i := range results {
		results[i] = make([]TurnResult, len(turns))
	}
	total := len(turns) * len(systems)
	var (
		progressMu sync.Mutex // Progress is called from one goroutine at a time
		done       int
	)
	// Retrievers that take a batch (retrieval.BatchRetriever: the
	// pipeline) get every turn of every system that uses them in one call,
	// after all the rewrites, so that a served embedder embeds the queries
	// in batches, each distinct text once, rather than one request per
	// turn; the others retrieve turn by turn.
	batched, err := retrieveAhead(ctx, turns, systems, opts.Concurrency)
	if err != nil {
		return Report{}, nil, fmt.Errorf("evaluate: %w", err)
	}
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(opts.Concurrency)
	for si := range systems {
		for _, conv := range convs {
			eg.Go(func() error {
				for _, i := range conv {
					if err := ectx.Err(); err != nil {
						return err
					}
					if batched[si] != nil {
						results[si][i] = finishTurn(ectx, systems[si], turns[i], batched[si][i], resp, scorer)
					} else {
						results[si][i] = runTurn(ectx, systems[si], turns[i], resp, scorer)
					}
					if opts.Progress != nil {
						progressMu.Lock()
						done++
						opts.Progress(done, total)
						progressMu.Unlock()
					}
				}
				return nil
			})
		}
	}
	if err := eg.Wait(); err != nil {
		return Report{}, nil, fmt.Errorf("evaluate: %w", err)
	}

	rep := Report{Turns: len(turns), Conversations: len(convs), Responder: resp.Name(), Stats: opts.Stats}
	if c, ok := scorer.(interface{ Config() hser.Config }); ok {
		rep.EMNormalization = c.Config().EMNormalization()
	}
	for _, t := range turns {
		if t.Answer != "" {
			rep.WithAnswer++
		}
		if len(t.Passages) > 0 {
			rep.WithGold++
		}
	}
	for si, s := range systems {
		rep.Systems = append(rep.Systems, summarizeSystem(s, results[si], convs, opts.Stats))
	}
	// Paired comparisons with the baseline of the same memory setting, and
	// memory on against off for the same rewriter.
	for si, s := range systems {
		if base := findSystem(systems, opts.Baseline, s.Memory, s.Variant); base >= 0 && base != si {
			cmp, err := compare(results[si], results[base], convs, opts.Stats)
			if err != nil {
				return Report{}, nil, err
			}
			rep.Systems[si].Baseline, rep.Systems[si].VsBaseline = systems[base].Name, cmp
		}
		if s.Memory {
			if off := findSystem(systems, s.Rewriter.Name(), false, ""); off >= 0 {
				cmp, err := compare(results[si], results[off], convs, opts.Stats)
				if err != nil {
					return Report{}, nil, err
				}
				rep.Systems[si].VsMemoryOff = cmp
			}
		}
	}
	rep.Seconds = time.Since(t0).Seconds()
	return rep, results, nil
}

func findSystem(systems []System, rewriter string, memory bool, variant string) int {
	for i, s := range systems {
		if s.Rewriter.Name() == rewriter && s.Memory == memory && s.Variant == variant {
			return i
		}
	}
	return -1
}

// PipelineRun is the passage ranking the pipeline produced (see
// retrieval.PassageRanking).
func PipelineRun(res retrieval.Result) []retrieval.Scored { return retrieval.PassageRanking(res) }

// ahead is a turn's rewrite and retrieval done ahead of it, in a batch.
type ahead struct {
	rewrite    string
	res        retrieval.Result
	stage, err string  // the failed stage (rewrite, retrieve) and its error
	seconds    float64 // the rewrite's time and an equal share of the batch's retrieval
}

// retrieveAhead rewrites every turn of every system whose retriever takes
// a batch, and retrieves for them with one RetrieveBatch per retriever
// (systems sharing a retriever share the call). out[si] is nil for a system
// retrieved turn by turn. Per-turn failures are kept in the turn's ahead;
// only a cancelled context is an error.
func retrieveAhead(ctx context.Context, turns []datasets.Turn, systems []System, conc int) ([][]ahead, error) {
	out := make([][]ahead, len(systems))
	groups := map[retrieval.BatchRetriever][]int{}
	var order []retrieval.BatchRetriever
	for si, s := range systems {
		br, ok := s.Retriever.(retrieval.BatchRetriever)
		if !ok {
			continue
		}
		if _, seen := groups[br]; !seen {
			order = append(order, br)
		}
		groups[br] = append(groups[br], si)
		out[si] = make([]ahead, len(turns))
	}
	if len(order) == 0 {
		return out, nil
	}
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(conc)
	for si := range systems {
		if out[si] == nil {
			continue
		}
		for i := range turns {
			eg.Go(func() error {
				if err := ectx.Err(); err != nil {
					return err
				}
				start := time.Now()
				a := &out[si][i]
				rw, err := systems[si].Rewriter.Rewrite(ectx, turns[i])
				if err != nil {
					a.stage, a.err = "rewrite", err.Error()
				}
				a.rewrite, a.seconds = rw, time.Since(start).Seconds()
				return nil
			})
		}
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	for _, br := range order {
		type at struct{ si, i int }
		var reqs []retrieval.Request
		var where []at
		for _, si := range groups[br] {
			for i, t := range turns {
				if out[si][i].stage == "" {
					reqs = append(reqs, retrieval.Request{User: t.User, Rewrite: out[si][i].rewrite, Query: t.Question})
					where = append(where, at{si, i})
				}
			}
		}
		if len(reqs) == 0 {
			continue
		}
		start := time.Now()
		// A served embedder may take minutes here (embedding the
		// candidates memory re-ranks); progress counts the turns after it.
		slog.Info("evaluate: retrieving for every turn in one batch", "systems", len(groups[br]), "requests", len(reqs))
		res, errs := br.RetrieveBatch(ctx, reqs)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		slog.Info("evaluate: batch retrieved", "requests", len(reqs), "elapsed_s", math.Round(time.Since(start).Seconds()*10)/10)
		share := time.Since(start).Seconds() / float64(len(reqs))
		extra := retrieval.RetryFailed(ctx, br, reqs, res, errs, conc, nil)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for j, w := range where {
			a := &out[w.si][w.i]
			a.seconds += share
			if extra != nil {
				a.seconds += extra[j]
			}
			if errs[j] != nil {
				a.stage, a.err = "retrieve", errs[j].Error()
				continue
			}
			a.res = res[j]
		}
	}
	return out, nil
}

func runTurn(ctx context.Context, s System, t datasets.Turn, resp Responder, scorer Scorer) TurnResult {
	start := time.Now()
	var a ahead
	rw, err := s.Rewriter.Rewrite(ctx, t)
	if err != nil {
		a.stage, a.err = "rewrite", err.Error()
	} else {
		a.rewrite = rw
		if a.res, err = s.Retriever.Retrieve(ctx, t.User, rw, t.Question); err != nil {
			a.stage, a.err = "retrieve", err.Error()
		}
	}
	a.seconds = time.Since(start).Seconds()
	return finishTurn(ctx, s, t, a, resp, scorer)
}

// finishTurn is the rest of a turn once rewritten and retrieved: the
// metrics of its ranking and memories, the answer and its score. Seconds is
// a's and the answer's.
func finishTurn(ctx context.Context, s System, t datasets.Turn, a ahead, resp Responder, scorer Scorer) TurnResult {
	start := time.Now()
	r := TurnResult{System: s.Name, Rewriter: s.Rewriter.Name(), Memory: s.Memory, ConvID: t.ConvID, Turn: t.Turn,
		Question: t.Question, Reference: t.Answer}
	fail := func(stage string, err string) TurnResult {
		r.ErrorStage, r.Error = stage, err
		r.Seconds = a.seconds + time.Since(start).Seconds()
		return r
	}
	if a.stage == "rewrite" {
		return fail(a.stage, a.err)
	}
	r.Rewrite = a.rewrite
	if a.stage != "" {
		return fail(a.stage, a.err)
	}
	res := a.res
	for _, m := range res.Trace.Memories {
		r.Memories = append(r.Memories, m.Text)
		r.MemoryIDs = append(r.MemoryIDs, m.ID)
	}
	r.Reranked = res.Trace.Reranked
	if s.Memory && len(t.MemoryLabels) > 0 {
		r.HasMemoryLabels = true
		r.MemPrecision, r.MemRecall, r.MemMRR = MemoryActivation(r.MemoryIDs, t.MemoryLabels)
	}
	r.Run = PipelineRun(res)
	// Like trec_eval, a judged turn counts even when no passage is relevant
	// (its metrics are 0), and a turn whose retrieval failed is absent.
	if q := t.Qrels(); len(q) > 0 {
		r.HasGold = true
		sc := ScoreRanking(r.Run, q)
		r.RecipRank, r.NDCG3, r.Recall10, r.Recall100 = sc.RecipRank, sc.NDCG3, sc.Recall10, sc.Recall100
	}
	ans, err := resp.Respond(ctx, t.Question, res.Chunks)
	if err != nil {
		return fail("respond", err.Error())
	}
	r.Answer = ans
	if t.Answer != "" {
		texts := make([]string, len(res.Chunks))
		for i, c := range res.Chunks {
			texts[i] = c.Text
		}
		r.Score = scorer.ScoreMulti(ans, t.References(), texts)
		// A judged turn's reward carries the retrieval terms of its own
		// ranking, as a rollout's does: with a retrieval reward (e.g.
		// reward.ndcg, reward.recall) the reward without them would be
		// another quantity under the same name.
		if q := t.Qrels(); len(q) > 0 {
			ranking := make([]string, len(r.Run))
			for i, p := range r.Run {
				ranking[i] = p.ID
			}
			r.Score = scorer.WithRetrieval(r.Score, ranking, q)
		}
		r.HasAnswer = true
	}
	r.Seconds = a.seconds + time.Since(start).Seconds()
	return r
}

// MemoryActivation scores activated memory ids against the relevant ones:
// precision |A∩R|/|A| (0 when nothing was activated), recall |A∩R|/|R| and
// the reciprocal rank of the first relevant activated memory.
func MemoryActivation(activated, relevant []string) (precision, recall, rr float64) {
	if len(relevant) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	hits := 0
	for i, id := range activated {
		if slices.Contains(relevant, id) {
			hits++
			if rr == 0 {
				rr = 1 / float64(i+1)
			}
		}
	}
	if len(activated) > 0 {
		precision = float64(hits) / float64(len(activated))
	}
	return precision, float64(hits) / float64(len(relevant)), rr
}

// perTurn is one metric of every turn (NaN where the turn failed or the
// metric does not apply), in input order.
func perTurn(res []TurnResult, metric string) []float64 {
	out := make([]float64, len(res))
	for i := range res {
		out[i] = res[i].metric(metric)
	}
	return out
}

func summarizeSystem(s System, res []TurnResult, convs [][]int, cfg stats.Config) SystemReport {
	sr := SystemReport{Name: s.Name, Checkpoint: s.Checkpoint, Rewriter: s.Rewriter.Name(), Memory: s.Memory, Turns: len(res),
		Failures: map[string]int{}, Metrics: map[string]stats.Estimate{}}
	for _, r := range res {
		if r.ErrorStage != "" {
			sr.Failed++
			sr.Failures[r.ErrorStage]++
		}
		sr.RunDepth = max(sr.RunDepth, len(r.Run))
		if len(r.Memories) > 0 {
			sr.MemoryTurns++
		}
		if r.Reranked {
			sr.RerankedTurns++
		}
	}
	for _, m := range allMetrics() {
		est, err := Estimate(convs, perTurn(res, m), cfg)
		if err != nil {
			continue // no turn has this metric (no answers or no gold passages)
		}
		sr.Metrics[m] = est
	}
	return sr
}

func compare(sys, base []TurnResult, convs [][]int, cfg stats.Config) (map[string]stats.Comparison, error) {
	out := map[string]stats.Comparison{}
	for _, m := range allMetrics() {
		c, err := Compare(convs, perTurn(sys, m), perTurn(base, m), cfg)
		if errors.Is(err, stats.ErrNoData) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("compare %s: %w", m, err)
		}
		out[m] = c
	}
	return out, nil
}
