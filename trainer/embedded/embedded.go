// Package embedded is the pure-Go term-selection policy that stands in for a
// LoRA trainer endpoint (trainer/PROTOCOL.md, "The embedded policy"): its
// features, sampling, SFT and GRPO updates (the loss, AdamW), checkpoints and
// step_id replay log. It implements trainer.Policy in process; `himes trainer
// serve` serves it over HTTP with trainer.NewHandler.
package embedded

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"

	"github.com/himes-rl/himes/trainer"
)

// Policy is the embedded term-selection policy: a logistic model over
// features of the dialogue history's content words. Each candidate term is
// kept independently with p = σ((w·φ − δ)/T), and greedily iff w·φ > 0; the
// "tokens" of a sample are its keep (1) / drop (0) decisions. δ, the sampling
// offset, is 0 until an SFT with a class weight w sets it to ln w
// (EmbeddedConfig.SampleCalibration). It implements trainer.Policy, trainer.Scorer and
// trainer.Deleter and is safe for concurrent use; mutating calls are
// serialized.
type Policy struct {
	cfg   trainer.EmbeddedConfig
	stats TermStats

	mu    sync.RWMutex
	st    policyState
	steps *stepLog
	cands *candCache // each prompt's candidates, shared by its samples and the update
}

// policyState is everything a checkpoint holds.
type policyState struct {
	w, m, v []float64 // weights and Adam moments
	t       int64     // Adam steps taken
	version int64
	ref     []float64 // KL reference snapshot; nil until the first grpo_step
	// offset is δ: sampling, logprobs and GRPO's loss see the logits w·φ − δ,
	// greedy decoding keeps w·φ > 0. SFTStep sets it (the prior correction
	// of its class weight); 0 otherwise.
	offset float64
}

func (s policyState) clone() policyState {
	s.w, s.m, s.v = clone(s.w), clone(s.m), clone(s.v)
	if s.ref != nil {
		s.ref = clone(s.ref)
	}
	return s
}

func clone(x []float64) []float64 { return append([]float64(nil), x...) }

// New returns a fresh embedded policy at version 0. stats may be nil,
// in which case the idf feature is 0.
func New(cfg trainer.EmbeddedConfig, stats TermStats) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("embedded policy config: %w", err)
	}
	w := make([]float64, numFeatures)
	rng := rand.New(rand.NewPCG(uint64(cfg.InitSeed), 0x5eed))
	for k := range w {
		if k == featBias {
			w[k] = cfg.InitBias
		} else if cfg.InitStd > 0 {
			w[k] = cfg.InitStd * rng.NormFloat64()
		}
	}
	return &Policy{
		cfg:   cfg,
		stats: stats,
		st:    policyState{w: w, m: make([]float64, numFeatures), v: make([]float64, numFeatures)},
		steps: newStepLog(cfg.StepCache),
		cands: newCandCache(),
	}, nil
}

// Weights returns a copy of the current weights, in the order of the feature
// names in Info().Adapter["features"].
func (e *Policy) Weights() []float64 {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return clone(e.st.w)
}

// Info describes the embedded policy.
func (e *Policy) Info(ctx context.Context) (trainer.Info, error) {
	if err := ctx.Err(); err != nil {
		return trainer.Info{}, err
	}
	e.mu.RLock()
	v, w := e.st.version, namedWeights(e.st.w)
	e.mu.RUnlock()
	return trainer.Info{
		ProtocolVersion: trainer.ProtocolVersion,
		Implementation:  "himes-embedded",
		BaseModel:       "himes-embedded/term-selector",
		Adapter: map[string]any{
			"type":           "term_selection",
			"features":       append([]string(nil), featureNames[:]...),
			"weights":        w,
			"max_candidates": e.cfg.MaxCandidates,
		},
		PolicyVersion: v,
		Reference:     "snapshot",
		LossTypes:     trainer.LossTypes(),
		KLEstimators:  trainer.KLEstimators(),
		Capabilities:  trainer.Capabilities{Entropy: true, Logprobs: true, Delete: true, DualClip: true, WeightDecay: true, KLMeasured: true, OptimizerReset: true},
		Limits:        trainer.Limits{MaxPrompts: e.cfg.MaxPrompts, MaxN: e.cfg.MaxN, MaxTokens: e.cfg.MaxCandidates, MaxBatch: e.cfg.MaxBatch},
		TokenKind:     "decisions",
	}, nil
}

// design is the L×D feature matrix of a prompt's first n candidates.
func design(cands []candidate) *mat.Dense {
	if len(cands) == 0 {
		return nil
	}
	d := mat.NewDense(len(cands), numFeatures, nil)
	for k, c := range cands {
		d.SetRow(k, c.phi[:])
	}
	return d
}

// logits returns Φw (nil for an empty Φ).
func logits(phi *mat.Dense, w []float64) []float64 {
	if phi == nil {
		return nil
	}
	r, _ := phi.Dims()
	z := mat.NewVecDense(r, nil)
	z.MulVec(phi, mat.NewVecDense(len(w), w))
	return z.RawVector().Data
}

// shifted returns z − δ, the logits that are sampled and scored, in a new slice.
func shifted(z []float64, offset float64) []float64 {
	out := make([]float64, len(z))
	for k, x := range z {
		out[k] = x - offset
	}
	return out
}

// decisionLogp is log p(a) for a keep/drop decision with logit z at temperature T.
func decisionLogp(a int, z, temp float64) float64 {
	if a == 1 {
		return logSigmoid(z / temp)
	}
	return logSigmoid(-z / temp)
}

// sampleRNG derives the random stream of sample j of prompt i from the seed,
// so every sample is reproducible on its own.
func sampleRNG(seed int64, i, j int) *rand.Rand {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(i))
	binary.LittleEndian.PutUint64(b[8:], uint64(j))
	return rand.New(rand.NewPCG(splitmix(uint64(seed)), splitmix(binary.LittleEndian.Uint64(b[:8])^splitmix(binary.LittleEndian.Uint64(b[8:])))))
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Sample draws N keep/drop decision sequences per prompt.
func (e *Policy) Sample(ctx context.Context, req trainer.SampleRequest) (trainer.SampleResponse, error) {
	n := req.N
	if n == 0 {
		n = 1
	}
	switch {
	case len(req.Prompts) == 0:
		return trainer.SampleResponse{}, trainer.Invalidf("prompts: at least one prompt is required")
	case n < 0:
		return trainer.SampleResponse{}, trainer.Invalidf("n: must be ≥ 1, got %d", req.N)
	case !finite(req.Temperature) || req.Temperature < 0:
		return trainer.SampleResponse{}, trainer.Invalidf("temperature: must be ≥ 0, got %v", req.Temperature)
	case !finite(req.TopP) || req.TopP < 0 || req.TopP > 1:
		return trainer.SampleResponse{}, trainer.Invalidf("top_p: must be in (0, 1], got %v", req.TopP)
	case req.MaxTokens < 0:
		return trainer.SampleResponse{}, trainer.Invalidf("max_tokens: must be ≥ 0, got %d", req.MaxTokens)
	}
	// The limits are checked before anything is allocated for the samples.
	if err := checkLimit("prompts", len(req.Prompts), "prompts", e.cfg.MaxPrompts); err != nil {
		return trainer.SampleResponse{}, err
	}
	if err := checkLimit("n", n, "samples per prompt", e.cfg.MaxN); err != nil {
		return trainer.SampleResponse{}, err
	}
	if err := checkLimit("max_tokens", req.MaxTokens, "tokens", e.cfg.MaxCandidates); err != nil {
		return trainer.SampleResponse{}, err
	}
	limit := e.cfg.MaxCandidates
	if req.MaxTokens > 0 {
		limit = min(limit, req.MaxTokens)
	}
	e.mu.RLock()
	w, version, offset := clone(e.st.w), e.st.version, e.st.offset
	e.mu.RUnlock()
	if err := checkExpected(req.ExpectedPolicyVersion, version); err != nil {
		return trainer.SampleResponse{}, err
	}

	out := trainer.SampleResponse{Samples: make([]trainer.Sample, 0, len(req.Prompts)*n), PolicyVersion: version}
	for i, p := range req.Prompts {
		if err := ctx.Err(); err != nil {
			return trainer.SampleResponse{}, err
		}
		rc := contextOf(p)
		pc := e.cands.get(rc, e.stats, limit)
		cands, truncated := pc.cands, pc.truncated
		z := logits(pc.phi, w)
		zs := shifted(z, offset)
		finish := "stop"
		if truncated && req.MaxTokens > 0 && req.MaxTokens < e.cfg.MaxCandidates {
			finish = "length"
		}
		for j := range n {
			rng := sampleRNG(req.Seed, i, j)
			ids := make([]int, len(cands))
			lps := make([]float64, len(cands))
			var kept []candidate
			for k, c := range cands {
				var keep bool
				temp := req.Temperature
				if temp == 0 {
					keep, temp = z[k] > 0, 1 // greedy, on the unshifted logit; logprobs under T = 1
				} else {
					keep = rng.Float64() < sigmoid(zs[k]/temp)
				}
				if keep {
					ids[k] = 1
					kept = append(kept, c)
				}
				lps[k] = decisionLogp(ids[k], zs[k], temp)
			}
			out.Samples = append(out.Samples, trainer.Sample{
				PromptIndex: i, SampleIndex: j,
				Text:     rewriteText(rc.question, kept),
				TokenIDs: ids, Logprobs: lps, FinishReason: finish, PolicyVersion: version,
			})
		}
	}
	return out, nil
}

// rewriteText is the question followed by the kept terms in the order they
// first occur in the history.
func rewriteText(question string, kept []candidate) string {
	slices.SortFunc(kept, func(a, b candidate) int { return a.first - b.first })
	parts := []string{strings.TrimSpace(question)}
	for _, c := range kept {
		parts = append(parts, c.term)
	}
	return strings.TrimSpace(strings.Join(parts, " "))
}

// scored is one completion prepared for scoring: its features and decisions.
type scored struct {
	phi *mat.Dense
	a   []int
}

// prepare resolves a prompt's candidates and checks the decisions against them.
func (e *Policy) prepare(field string, p trainer.Prompt, ids []int) (scored, *trainer.Error) {
	pc := e.cands.get(contextOf(p), e.stats, e.cfg.MaxCandidates)
	cands := pc.cands
	if len(ids) > len(cands) {
		return scored{}, trainer.Invalidf("%s.token_ids: %d decisions, but the prompt has %d candidate terms", field, len(ids), len(cands))
	}
	for t, a := range ids {
		if a != 0 && a != 1 {
			return scored{}, trainer.Invalidf("%s.token_ids[%d]: %d is not a decision (0 drop, 1 keep)", field, t, a)
		}
	}
	phi := pc.phi
	if len(ids) < len(cands) {
		phi = design(cands[:len(ids)])
	}
	return scored{phi: phi, a: ids}, nil
}

// Logprobs scores decision sequences under the current weights.
func (e *Policy) Logprobs(ctx context.Context, req trainer.LogprobsRequest) (trainer.LogprobsResponse, error) {
	if err := ctx.Err(); err != nil {
		return trainer.LogprobsResponse{}, err
	}
	temp := req.Temperature
	if temp == 0 {
		temp = 1
	}
	if !finite(temp) || temp < 0 {
		return trainer.LogprobsResponse{}, trainer.Invalidf("temperature: must be > 0, got %v", req.Temperature)
	}
	if err := checkLimit("items", len(req.Items), "items", e.cfg.MaxBatch); err != nil {
		return trainer.LogprobsResponse{}, err
	}
	items := make([]scored, len(req.Items))
	for k, it := range req.Items {
		s, err := e.prepare(fmt.Sprintf("items[%d]", k), it.Prompt, it.TokenIDs)
		if err != nil {
			return trainer.LogprobsResponse{}, err
		}
		items[k] = s
	}
	e.mu.RLock()
	w, version, offset := clone(e.st.w), e.st.version, e.st.offset
	e.mu.RUnlock()
	out := trainer.LogprobsResponse{Logprobs: make([][]float64, len(items)), PolicyVersion: version}
	for k, s := range items {
		out.Logprobs[k] = seqLogp(s, w, offset, temp)
	}
	return out, nil
}

// seqLogp is the log-probability of each of s's decisions at logits Φw − δ.
func seqLogp(s scored, w []float64, offset, temp float64) []float64 {
	z := shifted(logits(s.phi, w), offset)
	lp := make([]float64, len(s.a))
	for t, a := range s.a {
		lp[t] = decisionLogp(a, z[t], temp)
	}
	return lp
}

// addGrad adds Φᵀ·dz (the gradient through the logits) to g.
func addGrad(g []float64, phi *mat.Dense, dz []float64) {
	if phi == nil {
		return
	}
	var acc mat.VecDense
	acc.MulVec(phi.T(), mat.NewVecDense(len(dz), dz))
	floats.Add(g, acc.RawVector().Data)
}

// adamStep clips g to maxNorm (0 = no clipping), applies one AdamW update to
// st (weight decay wd decoupled from the gradient, as torch.optim.AdamW:
// w ← w − lr·wd·w, then the Adam step; every weight, the bias included), and
// returns the norm of g before clipping.
func (e *Policy) adamStep(st *policyState, g []float64, lr, wd, maxNorm float64) float64 {
	norm := floats.Norm(g, 2)
	if maxNorm > 0 && norm > maxNorm {
		floats.Scale(maxNorm/norm, g)
	}
	b1, b2 := e.cfg.AdamBeta1, e.cfg.AdamBeta2
	st.t++
	c1 := 1 - math.Pow(b1, float64(st.t))
	c2 := 1 - math.Pow(b2, float64(st.t))
	for k := range st.w {
		st.w[k] -= lr * wd * st.w[k]
		st.m[k] = b1*st.m[k] + (1-b1)*g[k]
		st.v[k] = b2*st.v[k] + (1-b2)*g[k]*g[k]
		st.w[k] -= lr * (st.m[k] / c1) / (math.Sqrt(st.v[k]/c2) + e.cfg.AdamEps)
	}
	return norm
}

// SFTStep fits the keep probabilities toward "the term occurs in the
// completion" by logistic regression (mean binary cross-entropy, T = 1,
// keep targets weighted by EmbeddedConfig.SFTPosWeight).
func (e *Policy) SFTStep(ctx context.Context, req trainer.SFTRequest) (trainer.SFTResponse, error) {
	if err := ctx.Err(); err != nil {
		return trainer.SFTResponse{}, err
	}
	if err := checkStepID(req.StepID); err != nil {
		return trainer.SFTResponse{}, err
	}
	epochs := req.Epochs
	if epochs == 0 {
		epochs = 1
	}
	switch {
	case len(req.Examples) == 0:
		return trainer.SFTResponse{}, trainer.Invalidf("examples: at least one example is required")
	case !finite(req.LearningRate) || req.LearningRate <= 0:
		return trainer.SFTResponse{}, trainer.Invalidf("learning_rate: must be > 0, got %v", req.LearningRate)
	case epochs < 0:
		return trainer.SFTResponse{}, trainer.Invalidf("epochs: must be ≥ 1, got %d", req.Epochs)
	case !finite(req.MaxGradNorm) || req.MaxGradNorm < 0:
		return trainer.SFTResponse{}, trainer.Invalidf("max_grad_norm: must be ≥ 0, got %v", req.MaxGradNorm)
	case !finite(req.WeightDecay) || req.WeightDecay < 0:
		return trainer.SFTResponse{}, trainer.Invalidf("weight_decay: must be ≥ 0, got %v", req.WeightDecay)
	}
	if err := checkLimit("examples", len(req.Examples), "examples", e.cfg.MaxBatch); err != nil {
		return trainer.SFTResponse{}, err
	}
	if err := checkExpectedArg(req.ExpectedPolicyVersion); err != nil {
		return trainer.SFTResponse{}, err
	}
	type example struct {
		phi *mat.Dense
		y   []float64
	}
	exs := make([]example, len(req.Examples))
	tokens := 0
	for k, ex := range req.Examples {
		pc := e.cands.get(contextOf(ex.Prompt), e.stats, e.cfg.MaxCandidates)
		cands := pc.cands
		inCompletion := map[string]bool{}
		for _, t := range Tokens(ex.Completion) {
			inCompletion[t] = true
		}
		y := make([]float64, len(cands))
		for t, c := range cands {
			y[t] = b2f(inCompletion[c.term])
		}
		exs[k] = example{phi: pc.phi, y: y}
		tokens += len(cands)
	}
	hash, herr := requestHash(trainer.SFTRequest{Examples: req.Examples, LearningRate: req.LearningRate, Epochs: req.Epochs,
		MaxGradNorm: req.MaxGradNorm, ExpectedPolicyVersion: req.ExpectedPolicyVersion, WeightDecay: req.WeightDecay})
	if herr != nil {
		return trainer.SFTResponse{}, herr
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if prev, err := e.steps.lookup(req.StepID, "sft_step", hash); err != nil {
		return trainer.SFTResponse{}, err
	} else if prev != nil {
		r := prev.(trainer.SFTResponse)
		r.Replayed = true
		return r, nil
	}
	// After the replay lookup: a retry of an applied call finds the version
	// moved by its own first attempt, and must replay, not fail.
	if err := checkExpected(req.ExpectedPolicyVersion, e.st.version); err != nil {
		return trainer.SFTResponse{}, err
	}
	st := e.st.clone()
	var lossSum, norm float64
	if tokens > 0 {
		n := float64(tokens)
		for range epochs {
			g := make([]float64, numFeatures)
			var loss float64
			for _, ex := range exs {
				z := logits(ex.phi, st.w)
				dz := make([]float64, len(z))
				for t := range z {
					l, d := weightedBCE(z[t], ex.y[t], e.cfg.SFTPosWeight)
					loss += l
					dz[t] = d / n
				}
				addGrad(g, ex.phi, dz)
			}
			lossSum += loss / n
			norm = e.adamStep(&st, g, req.LearningRate, req.WeightDecay, req.MaxGradNorm)
		}
	}
	if err := checkFinite(st.w); err != nil {
		return trainer.SFTResponse{}, err
	}
	if e.cfg.SampleCalibration == trainer.SampleCalibrationPrior {
		// A keep weight w adds about ln w to every logit of the fitted
		// model; GRPO samples the calibrated σ(z − ln w) while greedy
		// decoding still keeps z > 0 (calibrated p > 1/(1+w)).
		st.offset = math.Log(e.cfg.SFTPosWeight)
	}
	st.version++
	e.st = st
	res := trainer.SFTResponse{Loss: lossSum / float64(epochs), Tokens: tokens, GradNorm: norm, PolicyVersion: st.version}
	e.steps.store(req.StepID, "sft_step", hash, res)
	return res, nil
}

// GRPOStep applies μ Adam steps of the clipped surrogate (PROTOCOL.md).
func (e *Policy) GRPOStep(ctx context.Context, req trainer.GRPORequest) (trainer.GRPOResponse, error) {
	if err := ctx.Err(); err != nil {
		return trainer.GRPOResponse{}, err
	}
	if err := checkStepID(req.StepID); err != nil {
		return trainer.GRPOResponse{}, err
	}
	lc, err := req.Loss.Resolve()
	if err != nil {
		return trainer.GRPOResponse{}, err
	}
	if len(req.Samples) == 0 {
		return trainer.GRPOResponse{}, trainer.Invalidf("samples: at least one sample is required")
	}
	if err := checkLimit("samples", len(req.Samples), "samples", e.cfg.MaxBatch); err != nil {
		return trainer.GRPOResponse{}, err
	}
	if err := checkExpectedArg(req.ExpectedPolicyVersion); err != nil {
		return trainer.GRPOResponse{}, err
	}
	items := make([]scored, len(req.Samples))
	for i, s := range req.Samples {
		field := fmt.Sprintf("samples[%d]", i)
		if len(s.OldLogprobs) != len(s.TokenIDs) {
			return trainer.GRPOResponse{}, trainer.Invalidf("%s.old_logprobs: length %d, want %d (len(token_ids))", field, len(s.OldLogprobs), len(s.TokenIDs))
		}
		for t, lp := range s.OldLogprobs {
			if !finite(lp) || lp > 0 {
				return trainer.GRPOResponse{}, trainer.Invalidf("%s.old_logprobs[%d]: must be finite and ≤ 0, got %v", field, t, lp)
			}
		}
		if !finite(s.Advantage) {
			return trainer.GRPOResponse{}, trainer.Invalidf("%s.advantage: must be finite, got %v", field, s.Advantage)
		}
		sc, err := e.prepare(field, s.Prompt, s.TokenIDs)
		if err != nil {
			return trainer.GRPOResponse{}, err
		}
		items[i] = sc
	}
	// The resolved loss: a request that spells a default out and one that
	// omits it are the same request.
	hash, herr := requestHash(trainer.GRPORequest{Samples: req.Samples, Loss: trainer.LossConfigOf(lc), ExpectedPolicyVersion: req.ExpectedPolicyVersion,
		ResetOptimizer: req.ResetOptimizer})
	if herr != nil {
		return trainer.GRPOResponse{}, herr
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if prev, err := e.steps.lookup(req.StepID, "grpo_step", hash); err != nil {
		return trainer.GRPOResponse{}, err
	} else if prev != nil {
		r := prev.(trainer.GRPOResponse)
		r.Replayed = true
		return r, nil
	}
	if err := checkExpected(req.ExpectedPolicyVersion, e.st.version); err != nil {
		return trainer.GRPOResponse{}, err
	}
	st := e.st.clone()
	if req.ResetOptimizer {
		// A fresh Adam: SFT's moments would otherwise shrink RL's first
		// steps (v is sized to SFT's gradients). A replay never gets here.
		st.m, st.v, st.t = make([]float64, len(st.w)), make([]float64, len(st.w)), 0
	}
	if st.ref == nil {
		st.ref = clone(st.w) // the reference is the policy before its first GRPO update
	}
	var res trainer.GRPOResponse
	for range lc.Mu {
		stats, entropy, g := grpoForward(items, req.Samples, st.w, st.ref, st.offset, lc)
		norm := 0.0
		if stats.tokens > 0 {
			norm = e.adamStep(&st, g, lc.LearningRate, lc.WeightDecay, lc.MaxGradNorm)
		}
		res.Loss += stats.loss
		res.KL += stats.kl
		res.ClipFracLow += stats.clipLow
		res.ClipFracHigh += stats.clipHigh
		res.ClipFracDual += stats.clipDual
		res.GradNorm += norm
		res.Entropy += entropy
		res.Tokens = stats.tokens
	}
	mu := float64(lc.Mu)
	res.Loss /= mu
	res.KL /= mu
	res.ClipFracLow /= mu
	res.ClipFracHigh /= mu
	res.ClipFracDual /= mu
	res.GradNorm /= mu
	res.Entropy /= mu
	if err := checkFinite(st.w, res.Loss, res.KL, res.GradNorm, res.Entropy); err != nil {
		return trainer.GRPOResponse{}, err
	}
	st.version++
	e.st = st
	res.PolicyVersion = st.version
	norm, bias := weightStats(st.w)
	res.WeightNorm, res.Bias = &norm, &bias
	e.steps.store(req.StepID, "grpo_step", hash, res)
	return res, nil
}

// grpoForward evaluates the objective at weights w (reference weights ref),
// both at logits Φw − offset, and returns it, the token-mean entropy, and the
// gradient with respect to w (the offset is a constant: d(z − δ)/dw = Φ).
func grpoForward(items []scored, samples []trainer.GRPOSample, w, ref []float64, offset float64, lc trainer.ResolvedLoss) (lossStats, float64, []float64) {
	temp := lc.Temperature
	seqs := make([]seqInput, len(items))
	zs := make([][]float64, len(items))
	var entSum float64
	for i, it := range items {
		z := shifted(logits(it.phi, w), offset)
		zs[i] = z
		s := seqInput{logp: make([]float64, len(it.a)), old: samples[i].OldLogprobs, adv: samples[i].Advantage}
		for t, a := range it.a {
			s.logp[t] = decisionLogp(a, z[t], temp)
			p := sigmoid(z[t] / temp)
			entSum -= xlogx(p) + xlogx(1-p)
		}
		// The reference logprobs always: the KL is reported even when
		// kl_coef is 0 (capabilities.kl_measured), where it stays out of the loss.
		s.ref = seqLogp(it, ref, offset, temp)
		seqs[i] = s
	}
	stats, dlogp := grpoObjective(seqs, lc)
	g := make([]float64, len(w))
	for i, it := range items {
		dz := make([]float64, len(it.a))
		for t, a := range it.a {
			// d log p(a)/dz = (a − σ(z/T))/T
			dz[t] = dlogp[i][t] * (float64(a) - sigmoid(zs[i][t]/temp)) / temp
		}
		addGrad(g, it.phi, dz)
	}
	if stats.tokens > 0 {
		entSum /= float64(stats.tokens)
	}
	return stats, entSum, g
}

// weightStats is the L2 norm of the weights without the bias, and the bias:
// a term selector that keeps nothing (or everything) shows it there first.
func weightStats(w []float64) (norm, bias float64) {
	var ss float64
	for k, x := range w {
		if k == featBias {
			continue
		}
		ss += x * x
	}
	return math.Sqrt(ss), w[featBias]
}

func xlogx(p float64) float64 {
	if p <= 0 {
		return 0
	}
	return p * math.Log(p)
}

// checkFinite refuses to commit a numerically broken update.
func checkFinite(w []float64, xs ...float64) *trainer.Error {
	for _, x := range append(clone(w), xs...) {
		if !finite(x) {
			return trainer.NewError(trainer.CodeInternal, "update produced a non-finite value (%v); policy left unchanged", x)
		}
	}
	return nil
}

// checkLimit refuses a request whose count exceeds an advertised limit
// (info.limits).
func checkLimit(field string, count int, what string, limit int) *trainer.Error {
	if count > limit {
		return trainer.Invalidf("%s: %d %s, the limit is %d (info.limits)", field, count, what, limit)
	}
	return nil
}

func checkExpectedArg(expected *int64) *trainer.Error {
	if expected != nil && *expected < 0 {
		return trainer.Invalidf("expected_policy_version: must be ≥ 0, got %d", *expected)
	}
	return nil
}

// checkExpected enforces the expected_policy_version precondition.
func checkExpected(expected *int64, version int64) *trainer.Error {
	if err := checkExpectedArg(expected); err != nil {
		return err
	}
	if expected == nil || *expected == version {
		return nil
	}
	return trainer.NewError(trainer.CodeVersionMismatch, "expected_policy_version %d, but the policy is at version %d "+
		"(the trainer restarted, or another client changed the policy); nothing was applied", *expected, version)
}
