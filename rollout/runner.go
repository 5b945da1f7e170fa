package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/singleflight"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/retrieval/service"
)

// Scorer computes the HSER reward of an answer; *hser.Scorer implements it.
type Scorer interface {
	// ScoreMulti scores against every reference answer of a turn (the best
	// match counts; hser.Scorer.ScoreMulti).
	ScoreMulti(prediction string, references []string, context []string) hser.Score
	// WithRetrieval adds the retrieval terms (rank, Recall@k, NDCG@k, RR)
	// of a judged turn's ranking (hser.Scorer.WithRetrieval).
	WithRetrieval(s hser.Score, ranking []string, qrels map[string]int) hser.Score
	// Config is the reward's configuration (its rank weight decides
	// whether an unjudged turn can be scored).
	Config() hser.Config
}

// Sample is one sampled rewrite of a prompt.
type Sample struct {
	Index         int    // position in the group
	Rewrite       string // the policy's rewrite q'
	PolicyVersion int64  // the policy version that produced it
}

// Group is one prompt of a step with its G sampled rewrites.
type Group struct {
	PromptID string
	Turn     datasets.Turn
	Samples  []Sample
}

// Record is one rollout: what was retrieved and answered for one sample, its
// reward terms, and how it went. It is one row of the rollout ledger, so every
// field is a scalar or a list of scalars.
type Record struct {
	Step          int    `json:"step"`
	PromptID      string `json:"prompt_id"`
	ConvID        string `json:"conv_id"`
	Turn          int    `json:"turn"`
	GroupIndex    int    `json:"group_index"`
	SampleIndex   int    `json:"sample_index"`
	PolicyVersion int64  `json:"policy_version"`
	Question      string `json:"question"`
	Rewrite       string `json:"rewrite"`

	// The final top-k chunks handed to the responder, best first.
	ChunkIDs    []string  `json:"chunk_ids"`
	ChunkScores []float64 `json:"chunk_scores"`
	// Activated long-term memories (H_n): queries and similarities.
	Memories   []string  `json:"memories"`
	MemorySims []float64 `json:"memory_sims"`

	Answer string `json:"answer"`

	// Reward terms (hser.Score); zero and meaningless when Error is set.
	// They are always the answer's real scores: Reward = RougeF1 + Alpha·EM +
	// Beta·Hit, unless a reward-hacking guard replaced it (Guard). EM is the
	// reward's (reward.tokenizer's normalization); SquadEM and SquadF1 are
	// the official SQuAD v1.1 numbers, not part of the reward.
	RougeP  float64 `json:"rougeL_p"`
	RougeR  float64 `json:"rougeL_r"`
	RougeF1 float64 `json:"rougeL_f1"`
	EM      float64 `json:"em"`
	SquadEM float64 `json:"squad_em"`
	SquadF1 float64 `json:"squad_f1"`
	Hit     float64 `json:"hit"`
	Alpha   float64 `json:"alpha"`
	Beta    float64 `json:"beta"`
	// The rank term, recorded for every rollout of a judged turn (one with
	// qrels) whatever reward.rank is, so that `himes ablate rescore` can
	// weigh it in later: Judged, the 1-based rank of the first relevant
	// passage in the rewrite's passage ranking (0: none within RankDepth),
	// the ranking's depth in passages (retrieval.candidates bounds it), its
	// hser.RankReward and the weight Gamma (reward.rank) it entered Reward
	// with.
	Judged            bool    `json:"judged"`
	FirstRelevantRank int     `json:"first_relevant_rank"`
	RankDepth         int     `json:"rank_depth"`
	RankReward        float64 `json:"rank_reward"`
	Gamma             float64 `json:"gamma"`
	// The retrieval terms of a judged turn's rewrite, recorded whatever
	// their weights (reward.recall, reward.ndcg, reward.rr, which say with
	// what weight they entered Reward): trec_eval's recall_k and ndcg_cut_k
	// at reward.recall.k and reward.ndcg.k, and recip_rank, of the rewrite's
	// passage ranking against the turn's judgments.
	RecallK float64 `json:"recall_k"`
	NDCGK   float64 `json:"ndcg_k"`
	RR      float64 `json:"rr"`
	// Guard names the guards in penalty mode that caught the rewrite
	// (comma-separated, e.g. "answer_leak"), "" if none did; then Reward is
	// GuardPenalty, the guard_penalty term, and the other terms are not part
	// of it. Set by the training loop.
	Guard        string  `json:"guard"`
	GuardPenalty float64 `json:"guard_penalty"`
	Reward       float64 `json:"reward"`

	// Advantage and Included are filled by the training loop.
	Advantage float64 `json:"advantage"`
	Included  bool    `json:"included"`

	// Error is set when the rollout failed; such a rollout is not scored.
	// ErrorKind is one of the Kind constants (errors.go): retrieval_* for a
	// retrieval service's failures (retrieval/service/PROTOCOL.md).
	Error     string `json:"error"`
	ErrorKind string `json:"error_kind"`

	// Dedup: the sample reused the retrieval and answer of an earlier sample of
	// this step with the same normalized rewrite. CacheHit: the answer came
	// from the answer cache (or a concurrent identical call), not the responder.
	Dedup    bool `json:"dedup"`
	CacheHit bool `json:"cache_hit"`

	// Per-stage latency in seconds (for a deduplicated sample, the stages it reused).
	RetrieveSeconds float64 `json:"retrieve_seconds"`
	RespondSeconds  float64 `json:"respond_seconds"`
	ScoreSeconds    float64 `json:"score_seconds"`
}

// Failed reports whether the rollout failed (and so carries no reward).
func (r Record) Failed() bool { return r.Error != "" }

// Stats summarizes a Run. After de-duplication every unique rewrite is one
// job: its answer came from a ResponderCall, a CacheHit (the cache or a
// concurrent identical prompt), or it failed. DedupHits counts the samples
// that reused another sample's job. The Seconds are summed over the work
// done (concurrent rollouts add up: their total can exceed the Run's wall
// time); the Wall fields are the wall-clock time of each of Run's phases in
// turn (retrieval, responder calls, scoring), which add up to the Run. With
// a retriever that takes no batch, retrieval happens inside the responder
// phase and RetrieveWall is 0.
type Stats struct {
	Rollouts, Failed, ResponderCalls, DedupHits, CacheHits int
	RetrieveSeconds, RespondSeconds, ScoreSeconds          float64
	RetrieveWall, RespondWall, ScoreWall                   float64
}

// Runner executes rollouts. It keeps the answer cache across steps, so one
// Runner serves a whole training run (and evaluation with the same
// responder). Run may be called concurrently; calls share the cache.
type Runner struct {
	cfg    Config
	ret    retrieval.Retriever
	resp   Responder
	scorer Scorer
	cache  *answerCache
	calls  singleflight.Group // identical prompts in flight share one call
	share  bool               // answers may be shared (cache, singleflight): deterministic responder
	// retrieval names the retrieval terms in R (reward.rank, reward.recall,
	// ...): any makes an unjudged turn's rollout fail.
	retrieval []string
	log       *slog.Logger
}

// NewRunner returns a runner over a retriever, a responder and the reward.
func NewRunner(cfg Config, ret retrieval.Retriever, resp Responder, scorer Scorer) (*Runner, error) {
	if isNil(ret) {
		return nil, errors.New("rollout: nil retriever")
	}
	if isNil(resp) {
		return nil, errors.New("rollout: nil responder")
	}
	if isNil(scorer) {
		return nil, errors.New("rollout: nil scorer")
	}
	if cfg.Concurrency < 1 {
		return nil, fmt.Errorf("rollout: concurrency must be ≥ 1, got %d", cfg.Concurrency)
	}
	if cfg.CacheSize < 0 {
		return nil, fmt.Errorf("rollout: cache_size must be ≥ 0, got %d", cfg.CacheSize)
	}
	log := slog.Default().With("component", "rollout")
	size, dir := cfg.CacheSize, cfg.CacheDir
	// Reusing answers is only sound when the responder is deterministic
	// (temperature 0); a sampling responder must be asked every time.
	if d, ok := resp.(interface{ Deterministic() bool }); ok && !d.Deterministic() && (size > 0 || dir != "") {
		log.Info("answer cache off: the responder samples (temperature > 0)", "responder", resp.Name())
		size, dir = 0, ""
	}
	share := true
	if d, ok := resp.(interface{ Deterministic() bool }); ok && !d.Deterministic() {
		share = false
	}
	cache, err := newAnswerCache(size, dir, log)
	if err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	// Fewer rollouts in flight than the hosts accept leaves responder slots idle.
	if c, ok := resp.(interface{ Capacity() int }); ok && c.Capacity() > cfg.Concurrency {
		log.Warn("rollout concurrency is below the responder's capacity; hosts will idle",
			"concurrency", cfg.Concurrency, "capacity", c.Capacity())
	}
	return &Runner{cfg: cfg, ret: ret, resp: resp, scorer: scorer, cache: cache, share: share,
		retrieval: scorer.Config().RetrievalTerms(), log: log}, nil
}

// isNil catches typed nil pointers stored in interfaces (a nil *hser.Scorer).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// job is the unit of work after de-duplication: one retrieval and one answer
// shared by every sample with the same (user, question, normalized rewrite).
type job struct {
	user, question, rewrite string
	samples                 []int // flat sample indexes, the first one is the leader

	retrieved               bool // by the step's batch
	chunks                  []retrieval.Ranked
	texts                   []string // the chunks' texts, for scoring
	ranking                 []string // passage ids, best first (passageRanking)
	ranked                  bool
	trace                   retrieval.Trace
	answer                  string
	cacheKey                string // the answer cache's key, once computed
	err                     error
	called, cacheHit        bool
	retrieveSec, respondSec float64
}

// Run executes every sample of every group: retrieval → responder → reward.
// Records come back in (group, sample) order whatever the concurrency.
// Per-rollout failures are recorded (Error, ErrorKind) and not scored; Run
// returns an error only for fatal problems: cancellation of ctx, a model
// that is missing from a host, or more failed rollouts than
// max_failed_fraction allows (a *TooManyFailedError).
func (r *Runner) Run(ctx context.Context, step int, groups []Group) ([]Record, Stats, error) {
	var stats Stats
	type ref struct{ g, s int }
	var refs []ref
	for gi, g := range groups {
		for si := range g.Samples {
			refs = append(refs, ref{gi, si})
		}
	}
	// De-duplicate up front: all samples of the step are known, so the first
	// sample of each key (in (group, sample) order) leads, deterministically.
	var jobs []*job
	byKey := map[string]*job{}
	jobOf := make([]*job, len(refs))
	for i, rf := range refs {
		g := groups[rf.g]
		rw := g.Samples[rf.s].Rewrite
		key := strconv.Itoa(i)
		if r.cfg.Dedup {
			key = g.Turn.User + "\x00" + g.Turn.Question + "\x00" + NormalizeRewrite(rw)
		}
		j := byKey[key]
		if j == nil {
			j = &job{user: g.Turn.User, question: g.Turn.Question, rewrite: rw}
			byKey[key] = j
			jobs = append(jobs, j)
		}
		j.samples = append(j.samples, i)
		jobOf[i] = j
	}

	// A retriever that batches gets the step's distinct rewrites at once
	// (one call per batch to a retrieval service), before any responder call.
	if br, ok := r.ret.(retrieval.BatchRetriever); ok && len(jobs) > 0 {
		t0 := time.Now()
		if err := r.retrieveBatch(ctx, br, jobs); err != nil {
			return nil, stats, fmt.Errorf("rollout step %d: %w", step, err)
		}
		stats.RetrieveWall = time.Since(t0).Seconds()
	}
	respondStart := time.Now()

	// A fixed set of workers takes the jobs in order: a goroutine per job
	// would grow a fresh stack for every rollout.
	cache := r.cache.step()
	eg, egctx := errgroup.WithContext(ctx)
	var next atomic.Int64
	for range min(r.cfg.Concurrency, len(jobs)) {
		eg.Go(func() error {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(jobs)) {
					return nil
				}
				j := jobs[i]
				if err := egctx.Err(); err != nil {
					j.err = err // a fatal error elsewhere: start nothing new
					return err
				}
				r.runJob(egctx, cache, j)
				if j.err != nil && (isFatal(j.err) || ctx.Err() != nil) {
					return j.err
				}
			}
		})
	}
	// The caller names the step: these errors carry no prefix of their own.
	err := eg.Wait()
	if cerr := ctx.Err(); cerr != nil {
		return nil, stats, cerr
	}
	if err != nil {
		return nil, stats, err
	}
	for _, j := range jobs { // in job order: the LRU evicts the same answers every run
		if j.err == nil && j.cacheKey != "" && (j.called || j.cacheHit) {
			cache.commit(j.cacheKey, j.answer)
		}
	}
	stats.RespondWall = time.Since(respondStart).Seconds()
	scoreStart := time.Now()

	records := make([]Record, len(refs))
	for i, rf := range refs {
		g := groups[rf.g]
		s := g.Samples[rf.s]
		j := jobOf[i]
		rec := Record{
			Step: step, PromptID: g.PromptID, ConvID: g.Turn.ConvID, Turn: g.Turn.Turn,
			GroupIndex: rf.g, SampleIndex: s.Index, PolicyVersion: s.PolicyVersion,
			Question: g.Turn.Question, Rewrite: s.Rewrite,
			Dedup: j.samples[0] != i, CacheHit: j.cacheHit,
			RetrieveSeconds: j.retrieveSec, RespondSeconds: j.respondSec,
		}
		// Sized up front (nil when empty, as the ledger reads them back).
		if n := len(j.chunks); n > 0 {
			rec.ChunkIDs, rec.ChunkScores = make([]string, n), make([]float64, n)
			for k, c := range j.chunks {
				rec.ChunkIDs[k], rec.ChunkScores[k] = c.ID, c.Score
			}
		}
		if n := len(j.trace.Memories); n > 0 {
			rec.Memories, rec.MemorySims = make([]string, n), make([]float64, n)
			for k, m := range j.trace.Memories {
				rec.Memories[k], rec.MemorySims[k] = m.Text, m.Sim
			}
		}
		if rec.Dedup {
			stats.DedupHits++
		}
		if j.err != nil {
			rec.Error, rec.ErrorKind = j.err.Error(), j.errKind()
			stats.Failed++
		} else {
			rec.Answer = j.answer
			if j.texts == nil { // once per job: its samples share the chunks
				j.texts = make([]string, len(j.chunks))
				for k, c := range j.chunks {
					j.texts[k] = c.Text
				}
			}
			t0 := time.Now()
			sc := r.scorer.ScoreMulti(j.answer, g.Turn.References(), j.texts)
			if qrels := g.Turn.Qrels(); len(qrels) > 0 {
				ranking := j.passageRanking()
				sc = r.scorer.WithRetrieval(sc, ranking, qrels)
				rec.RankDepth = len(ranking)
			}
			rec.ScoreSeconds = time.Since(t0).Seconds()
			stats.ScoreSeconds += rec.ScoreSeconds
			if !sc.Judged && len(r.retrieval) > 0 {
				// No judgments, no rank: a 0 would read as "nothing relevant
				// retrieved". The rollout is failed, never scored.
				rec.Error, rec.ErrorKind = fmt.Sprintf("%s > 0 but turn %s has no relevance judgments (qrels)", strings.Join(r.retrieval, ", "), g.Turn.ID()), KindUnjudged
				stats.Failed++
			} else {
				setScore(&rec, sc)
			}
		}
		records[i] = rec
	}
	stats.Rollouts = len(records)
	stats.ScoreWall = time.Since(scoreStart).Seconds()
	for _, j := range jobs {
		stats.RetrieveSeconds += j.retrieveSec
		stats.RespondSeconds += j.respondSec
		if j.called {
			stats.ResponderCalls++
		}
		if j.cacheHit {
			stats.CacheHits++
		}
	}
	if stats.Failed > 0 {
		first := ""
		kinds := map[string]int{}
		for _, rec := range records {
			if rec.Error != "" {
				if first == "" {
					first = rec.Error
				}
				kinds[rec.ErrorKind]++
			}
		}
		r.log.Warn("rollouts failed", "step", step, "failed", stats.Failed, "of", stats.Rollouts, "first_error", first)
		if float64(stats.Failed) > r.cfg.MaxFailedFraction*float64(stats.Rollouts) {
			return nil, stats, &TooManyFailedError{Failed: stats.Failed, Total: stats.Rollouts,
				Max: r.cfg.MaxFailedFraction, Kinds: kinds, First: first}
		}
	}
	return records, stats, nil
}

// passageRanking is the job's passage ids, best first: the ranking `himes
// eval` scores (retrieval.PassageRanking of the final chunks and the
// first-stage candidates), computed once per job.
func (j *job) passageRanking() []string {
	if !j.ranked {
		run := retrieval.PassageRanking(retrieval.Result{Chunks: j.chunks, Trace: j.trace})
		j.ranking = make([]string, len(run))
		for i, p := range run {
			j.ranking[i] = p.ID
		}
		j.ranked = true
	}
	return j.ranking
}

func (j *job) errKind() string {
	var re *retrieveError
	if errors.As(j.err, &re) {
		return retrievalKind(re.err)
	}
	return errorKind(j.err)
}

// retrieveError marks a failure of the retrieval stage.
type retrieveError struct{ err error }

func (e *retrieveError) Error() string { return "retrieve: " + e.err.Error() }
func (e *retrieveError) Unwrap() error { return e.err }

// retrieveBatch retrieves every job in one batch. Each job's retrieve time
// is its share of the batch's wall time, so the step's sum is the time
// spent. It returns an error only when the run must stop: ctx ended, or a
// failure no later step can fix (a missing endpoint or index).
func (r *Runner) retrieveBatch(ctx context.Context, br retrieval.BatchRetriever, jobs []*job) error {
	reqs := make([]retrieval.Request, len(jobs))
	for i, j := range jobs {
		reqs[i] = retrieval.Request{User: j.user, Rewrite: j.rewrite, Query: j.question}
	}
	t0 := time.Now()
	res, errs := br.RetrieveBatch(ctx, reqs)
	share := time.Since(t0).Seconds() / float64(len(jobs))
	if err := ctx.Err(); err != nil {
		return err
	}
	// A fatal error stops the run, and a protocol break is the service's own
	// answer: neither is retried.
	extra := retrieval.RetryFailed(ctx, br, reqs, res, errs, r.cfg.Concurrency, func(err error) bool {
		var re *service.ResultError
		return !isFatal(err) && !errors.As(err, &re)
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, j := range jobs {
		j.retrieved, j.retrieveSec = true, share
		if extra != nil {
			j.retrieveSec += extra[i]
		}
		if errs[i] != nil {
			if isFatal(errs[i]) {
				return errs[i]
			}
			j.err = &retrieveError{errs[i]}
			continue
		}
		j.chunks, j.trace = res[i].Chunks, res[i].Trace
	}
	return nil
}

// runJob retrieves (unless a batch did) and answers one deduplicated rewrite.
func (r *Runner) runJob(ctx context.Context, cache *cacheStep, j *job) {
	if !j.retrieved {
		t0 := time.Now()
		res, err := r.ret.Retrieve(ctx, j.user, j.rewrite, j.question)
		j.retrieveSec = time.Since(t0).Seconds()
		if err != nil {
			j.err = &retrieveError{err}
			return
		}
		j.chunks, j.trace = res.Chunks, res.Trace
	} else if j.err != nil {
		return
	}
	res := retrieval.Result{Chunks: j.chunks, Trace: j.trace}

	key, err := r.cacheKey(j.question, res.Chunks)
	if err != nil {
		j.err = fmt.Errorf("respond: %w", err)
		return
	}
	j.cacheKey = key
	if a, ok := cache.get(key); ok {
		j.answer, j.cacheHit = a, true
		return
	}
	t1 := time.Now()
	if !r.share {
		a, err := r.resp.Respond(ctx, j.question, res.Chunks)
		j.respondSec, j.called = time.Since(t1).Seconds(), true
		if err != nil {
			j.err = fmt.Errorf("respond: %w", err)
		}
		j.answer = a
		return
	}
	var led atomic.Bool
	v, err, _ := r.calls.Do(key, func() (any, error) {
		// Check again: an identical call may have finished and filled the
		// cache since the lookup above. Without this the number of responder
		// calls (and cache hits) would depend on goroutine timing.
		if a, ok := cache.get(key); ok {
			return a, nil
		}
		led.Store(true)
		a, err := r.resp.Respond(ctx, j.question, res.Chunks)
		if err == nil {
			cache.put(key, a)
		}
		return a, err
	})
	j.respondSec = time.Since(t1).Seconds()
	j.called = led.Load()
	if err != nil {
		j.err = fmt.Errorf("respond: %w", err)
		return
	}
	j.answer = v.(string)
	// An answer shared from a concurrent identical call is a cache hit too:
	// no responder call was made for this job.
	j.cacheHit = !j.called
}

// cacheKey is (responder name, rendered prompt). Responders that do not
// render a prompt are keyed by the question and the chunks' ids and texts.
func (r *Runner) cacheKey(question string, chunks []retrieval.Ranked) (string, error) {
	name := r.resp.Name()
	if pr, ok := r.resp.(PromptRenderer); ok {
		p, err := pr.RenderPrompt(question, chunks)
		if err != nil {
			return "", err
		}
		return name + "\x00" + p, nil
	}
	// Sized up front: chunk texts make the key kilobytes long, and growing
	// it by doubling would allocate about twice that per rollout.
	n := len(name) + 1 + len(question)
	for _, c := range chunks {
		n += 2 + len(c.ID) + len(c.Text)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(name)
	b.WriteByte(0)
	b.WriteString(question)
	for _, c := range chunks {
		b.WriteByte(0)
		b.WriteString(c.ID)
		b.WriteByte(1)
		b.WriteString(c.Text)
	}
	return b.String(), nil
}

// NormalizeRewrite is the de-duplication key of a rewrite: case-folded with
// whitespace collapsed. Retrievers tokenize case-insensitively, so two
// rewrites that differ only there retrieve the same chunks.
func NormalizeRewrite(s string) string {
	if out, ok := normalizeRewriteASCII(s); ok {
		return out
	}
	return strings.Join(strings.Fields(strings.ToLower(s)), " ")
}

// normalizeRewriteASCII is NormalizeRewrite for ASCII text in one pass (one
// allocation, none when s is already normal); false for any other text.
func normalizeRewriteASCII(s string) (string, bool) {
	isSpace := func(c byte) bool { return c == ' ' || ('\t' <= c && c <= '\r') } // unicode.IsSpace on ASCII
	normal, n, inWord := true, 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 0x80:
			return "", false
		case isSpace(c):
			if c != ' ' || !inWord || i+1 == len(s) || isSpace(s[i+1]) {
				normal = false // not one space between two words
			}
			inWord = false
		default:
			if 'A' <= c && c <= 'Z' {
				normal = false
			}
			if !inWord && n > 0 {
				n++ // the separating space
			}
			inWord = true
			n++
		}
	}
	if normal {
		return s, true
	}
	b := make([]byte, 0, n)
	inWord = false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isSpace(c) {
			inWord = false
			continue
		}
		if !inWord && len(b) > 0 {
			b = append(b, ' ')
		}
		inWord = true
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return string(b), true
}

// CacheLen reports how many answers the in-memory cache holds.
func (r *Runner) CacheLen() int { return r.cache.len() }
