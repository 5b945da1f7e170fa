package embedded

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/himes-rl/himes/trainer"
)

// bronze is a small dialogue whose candidates are worked out by hand below.
func bronze() trainer.Prompt {
	return trainer.Prompt{ID: "bronze", Dialogue: &trainer.Dialogue{
		History: []trainer.Message{
			{Role: "user", Content: "Tell me about the Bronze Age collapse."},
			{Role: "assistant", Content: "The Late Bronze Age collapse happened around 1177 BC in the Mediterranean."},
			{Role: "user", Content: "Which civilizations fell?"},
		},
		Question: "What caused the collapse?",
	}}
}

func coffee() trainer.Prompt {
	return trainer.Prompt{ID: "coffee", Dialogue: &trainer.Dialogue{
		History: []trainer.Message{
			{Role: "user", Content: "How is espresso brewed?"},
			{Role: "assistant", Content: "Espresso forces hot water through finely ground coffee at high pressure."},
			{Role: "user", Content: "And cold brew coffee?"},
			{Role: "assistant", Content: "Cold brew steeps coarse grounds in cold water for many hours."},
		},
		Question: "Which has more caffeine?",
	}}
}

type mapStats map[string]float64

func (m mapStats) IDF(t string) float64 { return m[t] }

func newTestEmbedded(t *testing.T, stats TermStats) *Policy {
	t.Helper()
	cfg := trainer.DefaultEmbeddedConfig()
	cfg.CheckpointDir = t.TempDir()
	e, err := New(cfg, stats)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestCandidatesByHand(t *testing.T) {
	cands, truncated := candidates(contextOf(bronze()), mapStats{"bronze": 4.5}, 32)
	var terms []string
	for _, c := range cands {
		terms = append(terms, c.term)
	}
	// Stopwords (tell, me, about, the, in, which) and question words
	// (collapse) are gone; "bronze" and "age" once. Ranked: user-turn terms
	// first, most recent message first, then assistant-only terms, ties in
	// first-occurrence order.
	want := []string{"civilizations", "fell", "bronze", "age", "late", "happened", "around", "1177", "bc", "mediterranean"}
	if !reflect.DeepEqual(terms, want) || truncated {
		t.Fatalf("candidates = %v (truncated %v), want %v", terms, truncated, want)
	}
	// bias log_tf idf recency user asst cap first lastUser num log_len,
	// log_user_tf lastAsst in_kb npmi_max npmi_mean q_content q_anaphor lead npmi_gap.
	// The question has two content words (caused, collapse): 2/5. Without
	// co-occurrence statistics in_kb and the npmi features are 0. "bronze"
	// and "1177" are among the first 12 words of the assistant message.
	wantBronze := [numFeatures]float64{1, math.Log(3), 4.5, 0.5, 1, 1, 1, 1, 0, 0, math.Log(6),
		math.Log(2), 1, 0, 0, 0, 0.4, 0, 1, 0}
	want1177 := [numFeatures]float64{1, math.Log(2), 0, 0.5, 0, 1, 0, 0, 0, 1, math.Log(4),
		0, 1, 0, 0, 0, 0.4, 0, 1, 0}
	wantFell := [numFeatures]float64{1, math.Log(2), 0, 1, 1, 0, 0, 0, 1, 0, math.Log(4),
		math.Log(2), 0, 0, 0, 0, 0.4, 0, 0, 0}
	for _, c := range []struct {
		got  [numFeatures]float64
		want [numFeatures]float64
		name string
	}{{cands[2].phi, wantBronze, "bronze"}, {cands[7].phi, want1177, "1177"}, {cands[1].phi, wantFell, "fell"}} {
		if c.got != c.want {
			t.Errorf("φ(%s) = %v, want %v", c.name, c.got, c.want)
		}
	}
	// A cap keeps a prefix of the ranking.
	if capped, truncated := candidates(contextOf(bronze()), nil, 3); len(capped) != 3 || !truncated || capped[0].term != want[0] || capped[1].term != want[1] || capped[2].term != want[2] {
		t.Errorf("cap 3: %v, truncated %v", capped, truncated)
	}
	if cands[2].first != 0 || cands[0].first != 8 || cands[9].first != 7 {
		t.Errorf("first-occurrence ranks: %+v", cands)
	}
}

func TestContextFallbacks(t *testing.T) {
	p := trainer.Prompt{Messages: []trainer.Message{
		{Role: "system", Content: "Rewrite the question."},
		{Role: "user", Content: "Bronze Age?"},
		{Role: "assistant", Content: "Yes."},
		{Role: "user", Content: "What caused it?"},
	}}
	rc := contextOf(p)
	if rc.question != "What caused it?" || len(rc.history) != 2 || rc.history[0].Content != "Bronze Age?" {
		t.Errorf("messages fallback: %+v", rc)
	}
	rc = contextOf(trainer.Prompt{Text: "just text"})
	if rc.question != "just text" || len(rc.history) != 0 {
		t.Errorf("text fallback: %+v", rc)
	}
}

func TestSampleDeterministicAndWellFormed(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	req := trainer.SampleRequest{Prompts: []trainer.Prompt{bronze(), coffee(), {Text: "no history"}}, N: 5, Temperature: 1, Seed: 7}
	a, err := e.Sample(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Samples) != 15 {
		t.Fatalf("%d samples, want 15", len(a.Samples))
	}
	for k, s := range a.Samples {
		if s.PromptIndex != k/5 || s.SampleIndex != k%5 {
			t.Errorf("sample %d has indices (%d, %d)", k, s.PromptIndex, s.SampleIndex)
		}
		if len(s.Logprobs) != len(s.TokenIDs) {
			t.Errorf("sample %d: %d logprobs for %d tokens", k, len(s.Logprobs), len(s.TokenIDs))
		}
		// With zero weights every decision has p = ½.
		for _, lp := range s.Logprobs {
			near(t, "logprob", lp, math.Log(0.5))
		}
		// Text = question + kept terms.
		q := contextOf(req.Prompts[s.PromptIndex]).question
		// Kept terms appear in history order: find them in the history text.
		cands, _ := candidates(contextOf(req.Prompts[s.PromptIndex]), nil, 64)
		keptSet := map[string]bool{}
		for i, id := range s.TokenIDs {
			if id == 1 {
				keptSet[cands[i].term] = true
			}
		}
		want := []string{q}
		for _, m := range contextOf(req.Prompts[s.PromptIndex]).history {
			for _, w := range Tokens(m.Content) {
				if keptSet[w] {
					want = append(want, w)
					delete(keptSet, w)
				}
			}
		}
		if s.Text != strings.Join(want, " ") {
			t.Errorf("sample %d text %q, want %q", k, s.Text, strings.Join(want, " "))
		}
	}
	if got := a.Samples[10]; got.Text != "no history" || len(got.TokenIDs) != 0 {
		t.Errorf("no-history sample: %+v", got)
	}
	b, err := e.Sample(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("same seed gave different samples")
	}
	req.Seed = 8
	c, _ := e.Sample(ctx, req)
	if reflect.DeepEqual(a.Samples, c.Samples) {
		t.Error("a different seed gave identical samples")
	}
	// Each sample's stream depends only on (seed, i, j): sampling prompt 0
	// alone reproduces its samples.
	req.Seed, req.Prompts = 7, req.Prompts[:1]
	d, _ := e.Sample(ctx, req)
	if !reflect.DeepEqual(d.Samples, a.Samples[:5]) {
		t.Error("samples of prompt 0 depend on the other prompts")
	}
}

func TestSampleGreedyAndMaxTokens(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	// Weights favouring user-turn terms: greedy keeps exactly those with w·φ > 0.
	e.st.w[featBias] = -1
	e.st.w[featUser] = 2
	res, err := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze()}, N: 2, Temperature: 0})
	if err != nil {
		t.Fatal(err)
	}
	want := "What caused the collapse? bronze age civilizations fell"
	for _, s := range res.Samples {
		if s.Text != want {
			t.Errorf("greedy text %q, want %q", s.Text, want)
		}
		// Logprobs under T = 1: kept user terms σ(1), dropped σ(1) too.
		for _, lp := range s.Logprobs {
			near(t, "greedy logprob", lp, logSigmoid(1))
		}
	}
	res, _ = e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze()}, Temperature: 0, MaxTokens: 3})
	// The first three ranked candidates are civilizations, fell, bronze (all
	// kept); the text lists them in history order.
	if s := res.Samples[0]; len(s.TokenIDs) != 3 || s.FinishReason != "length" || s.Text != "What caused the collapse? bronze civilizations fell" {
		t.Errorf("max_tokens 3: %+v", s)
	}
}

func TestSampleLogprobsMatchScoring(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, mapStats{"bronze": 3, "espresso": 2})
	e.st.w = []float64{-0.3, 0.4, 0.2, 0.7, 0.5, -0.2, 0.3, 0.1, 0.6, -0.4, 0.05, 0.15, -0.25, 0.35, 0.45, -0.1, -0.5, 0.3, 0.2, 0.4, 0.3}
	res, err := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze(), coffee()}, N: 3, Temperature: 0.7, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	var items []trainer.LogprobsItem
	for _, s := range res.Samples {
		items = append(items, trainer.LogprobsItem{Prompt: []trainer.Prompt{bronze(), coffee()}[s.PromptIndex], TokenIDs: s.TokenIDs})
	}
	lp, err := e.Logprobs(ctx, trainer.LogprobsRequest{Items: items, Temperature: 0.7})
	if err != nil {
		t.Fatal(err)
	}
	for k, s := range res.Samples {
		if !reflect.DeepEqual(lp.Logprobs[k], s.Logprobs) {
			t.Errorf("sample %d: scored %v, sampled %v", k, lp.Logprobs[k], s.Logprobs)
		}
	}
	_, err = e.Logprobs(ctx, trainer.LogprobsRequest{Items: []trainer.LogprobsItem{{Prompt: bronze(), TokenIDs: make([]int, 11)}}})
	if trainer.ErrorCode(err) != trainer.CodeInvalidArgument || !strings.Contains(err.Error(), "items[0].token_ids: 11 decisions, but the prompt has 10 candidate terms") {
		t.Errorf("too many decisions: %v", err)
	}
}

func sftBatch() []trainer.SFTExample {
	return []trainer.SFTExample{
		{Prompt: bronze(), Completion: "What caused the Late Bronze Age collapse?"},
		{Prompt: coffee(), Completion: "Which has more caffeine, espresso or cold brew coffee?"},
	}
}

func TestSFTStepLowersLossAndMatchesBCE(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	first, err := e.SFTStep(ctx, trainer.SFTRequest{StepID: "s1", Examples: sftBatch(), LearningRate: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	// Zero weights: every candidate has p = ½, so the BCE is log 2 whatever the labels.
	near(t, "initial loss", first.Loss, math.Ln2)
	// bronze has 10 candidates; coffee: espresso, brewed, forces, hot, water,
	// finely, ground, coffee, high, pressure, cold, brew, steeps, coarse,
	// grounds, hours (16).
	if first.Tokens != 26 || first.PolicyVersion != 1 {
		t.Errorf("tokens %d version %d, want 26 and 1", first.Tokens, first.PolicyVersion)
	}
	prev := first.Loss
	for k := 2; k <= 6; k++ {
		r, err := e.SFTStep(ctx, trainer.SFTRequest{StepID: "s" + string(rune('0'+k)), Examples: sftBatch(), LearningRate: 0.05})
		if err != nil {
			t.Fatal(err)
		}
		if !(r.Loss < prev) {
			t.Fatalf("step %d: loss %v did not drop below %v", k, r.Loss, prev)
		}
		prev = r.Loss
	}
}

func seqSum(t *testing.T, e *Policy, p trainer.Prompt, ids []int) float64 {
	t.Helper()
	lp, err := e.Logprobs(context.Background(), trainer.LogprobsRequest{Items: []trainer.LogprobsItem{{Prompt: p, TokenIDs: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	s := 0.0
	for _, x := range lp.Logprobs[0] {
		s += x
	}
	return s
}

func TestGRPOStepDirection(t *testing.T) {
	ctx := context.Background()
	for _, adv := range []float64{1, -1} {
		e := newTestEmbedded(t, nil)
		e.st.w = []float64{-0.3, 0.4, 0.2, 0.7, 0.5, -0.2, 0.3, 0.1, 0.6, -0.4, 0.05, 0.15, -0.25, 0.35, 0.45, -0.1, -0.5, 0.3, 0.2, 0.4, 0.3}
		res, _ := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze()}, Temperature: 1, Seed: 11})
		s := res.Samples[0]
		before := seqSum(t, e, bronze(), s.TokenIDs)
		for _, typ := range trainer.LossTypes() {
			r, err := e.GRPOStep(ctx, trainer.GRPORequest{StepID: typ, Samples: []trainer.GRPOSample{{Prompt: bronze(), TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: adv}},
				Loss: trainer.LossConfig{Type: new(typ), LearningRate: new(0.01), KLCoef: new(0.01)}})
			if err != nil {
				t.Fatal(err)
			}
			after := seqSum(t, e, bronze(), s.TokenIDs)
			if adv > 0 && !(after > before) || adv < 0 && !(after < before) {
				t.Errorf("%s, advantage %v: sequence logprob %v → %v", typ, adv, before, after)
			}
			if r.Entropy <= 0 || r.Entropy > math.Ln2 || r.Tokens != 10 {
				t.Errorf("%s: entropy %v tokens %d", typ, r.Entropy, r.Tokens)
			}
			before = after
		}
	}
}

func TestGRPOFirstStepKLZero(t *testing.T) {
	// The reference is the policy before the first GRPO update, so the first
	// step's KL is exactly 0 and later ones are positive.
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	if _, err := e.SFTStep(ctx, trainer.SFTRequest{StepID: "sft", Examples: sftBatch(), LearningRate: 0.1}); err != nil {
		t.Fatal(err)
	}
	res, _ := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze(), coffee()}, N: 2, Temperature: 1, Seed: 5})
	var samples []trainer.GRPOSample
	for k, s := range res.Samples {
		samples = append(samples, trainer.GRPOSample{Prompt: []trainer.Prompt{bronze(), coffee()}[s.PromptIndex], TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: float64(k%3) - 1})
	}
	lc := trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(0.05), KLCoef: new(0.1)}
	r1, err := e.GRPOStep(ctx, trainer.GRPORequest{StepID: "g1", Samples: samples, Loss: lc})
	if err != nil {
		t.Fatal(err)
	}
	if r1.KL != 0 || r1.ClipFracLow != 0 || r1.ClipFracHigh != 0 {
		t.Errorf("first step: kl %v clip %v/%v, want 0 (policy = reference = sampler)", r1.KL, r1.ClipFracLow, r1.ClipFracHigh)
	}
	r2, _ := e.GRPOStep(ctx, trainer.GRPORequest{StepID: "g2", Samples: samples, Loss: lc})
	if !(r2.KL > 0) {
		t.Errorf("second step kl %v, want > 0", r2.KL)
	}
}

// With kl_coef 0 the embedded policy still reports the KL to its reference
// (capabilities.kl_measured), and each answer carries the updated weights'
// norm (bias left out) and bias.
func TestGRPOReportsKLAtCoefZeroAndWeightStats(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	if info, _ := e.Info(ctx); !info.Capabilities.KLMeasured {
		t.Fatal("capabilities.kl_measured is false")
	}
	res, _ := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze(), coffee()}, N: 2, Temperature: 1, Seed: 5})
	var samples []trainer.GRPOSample
	for k, s := range res.Samples {
		samples = append(samples, trainer.GRPOSample{Prompt: []trainer.Prompt{bronze(), coffee()}[s.PromptIndex], TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: float64(k%3) - 1})
	}
	lc := trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(0.05), KLCoef: new(0.0)}
	for i, id := range []string{"g1", "g2"} {
		r, err := e.GRPOStep(ctx, trainer.GRPORequest{StepID: id, Samples: samples, Loss: lc})
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 && !(r.KL > 0) {
			t.Errorf("second step with kl_coef 0: kl %v, want > 0 (the policy left its reference)", r.KL)
		}
		w := e.Weights()
		var ss float64
		for k, x := range w {
			if k != featBias {
				ss += x * x
			}
		}
		if r.WeightNorm == nil || r.Bias == nil || math.Abs(*r.WeightNorm-math.Sqrt(ss)) > 1e-12 || *r.Bias != w[featBias] {
			t.Errorf("step %s: weight_norm %v bias %v, want %v and %v", id, r.WeightNorm, r.Bias, math.Sqrt(ss), w[featBias])
		}
	}
}

func TestGRPOGradientMatchesFiniteDifferences(t *testing.T) {
	e := newTestEmbedded(t, mapStats{"bronze": 2, "coffee": 1})
	w := []float64{-0.3, 0.4, 0.2, 0.7, 0.5, -0.2, 0.3, 0.1, 0.6, -0.4, 0.05, 0.15, -0.25, 0.35, 0.45, -0.1, -0.5, 0.3, 0.2, 0.4, 0.3}
	ref := []float64{-0.1, 0.2, 0.1, 0.5, 0.3, 0, 0.2, 0.2, 0.4, -0.2, 0.1, 0.1, -0.1, 0.2, 0.3, 0, -0.3, 0.2, 0.1, 0.2, 0.1}
	e.st.w = clone(ref)
	res, _ := e.Sample(context.Background(), trainer.SampleRequest{Prompts: []trainer.Prompt{bronze(), coffee()}, N: 2, Temperature: 0.8, Seed: 2})
	var samples []trainer.GRPOSample
	var items []scored
	for k, s := range res.Samples {
		p := []trainer.Prompt{bronze(), coffee()}[s.PromptIndex]
		samples = append(samples, trainer.GRPOSample{Prompt: p, TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: []float64{1.3, -0.7, 0.2, -1.1}[k]})
		it, perr := e.prepare("s", p, s.TokenIDs)
		if perr != nil {
			t.Fatal(perr)
		}
		items = append(items, it)
	}
	// Wide clip range keeps every token off the clip kinks, where the
	// objective is not differentiable.
	for _, typ := range trainer.LossTypes() {
		lc := resolve(t, trainer.LossConfig{Type: new(typ), ClipLow: new(0.9), ClipHigh: new(5.0), KLCoef: new(0.3), LearningRate: new(1.0), Temperature: new(0.8)})
		_, _, g := grpoForward(items, samples, w, ref, 0.7, lc)
		for k := range w {
			const h = 1e-6
			wp, wm := clone(w), clone(w)
			wp[k] += h
			wm[k] -= h
			lp, _, _ := grpoForward(items, samples, wp, ref, 0.7, lc)
			lm, _, _ := grpoForward(items, samples, wm, ref, 0.7, lc)
			fd := (lp.loss - lm.loss) / (2 * h)
			if math.Abs(fd-g[k]) > 1e-6*max(1, math.Abs(fd)) {
				t.Errorf("%s: dL/dw[%d] = %v, finite difference %v", typ, k, g[k], fd)
			}
		}
	}
}

func TestStepIDIdempotency(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	res, _ := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze()}, Temperature: 1, Seed: 1})
	s := res.Samples[0]
	req := trainer.GRPORequest{StepID: "step-1", Samples: []trainer.GRPOSample{{Prompt: bronze(), TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: 1}},
		Loss: trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(0.1)}}
	r1, err := e.GRPOStep(ctx, req)
	if err != nil || r1.Replayed || r1.PolicyVersion != 1 {
		t.Fatalf("first: %+v %v", r1, err)
	}
	w1 := e.Weights()
	r2, err := e.GRPOStep(ctx, req)
	if err != nil || !r2.Replayed || r2.PolicyVersion != 1 {
		t.Fatalf("repeat: %+v %v", r2, err)
	}
	r2.Replayed = false
	if r1 != r2 || !reflect.DeepEqual(w1, e.Weights()) {
		t.Error("the repeat changed the result or the weights")
	}
	// The same step_id for another call, or another body, is a conflict.
	_, err = e.SFTStep(ctx, trainer.SFTRequest{StepID: "step-1", Examples: sftBatch(), LearningRate: 0.1})
	if trainer.ErrorCode(err) != trainer.CodeConflict {
		t.Errorf("sft with a grpo step_id: %v", err)
	}
	req.Samples[0].Advantage = -1
	if _, err := e.GRPOStep(ctx, req); trainer.ErrorCode(err) != trainer.CodeConflict {
		t.Errorf("grpo with another body: %v", err)
	}
	if _, err := e.GRPOStep(ctx, trainer.GRPORequest{Samples: req.Samples, Loss: req.Loss}); trainer.ErrorCode(err) != trainer.CodeInvalidArgument {
		t.Errorf("no step_id: %v", err)
	}
	// A failed call is not remembered.
	bad := req
	bad.StepID, bad.Loss.Type = "step-2", new("x")
	if _, err := e.GRPOStep(ctx, bad); trainer.ErrorCode(err) != trainer.CodeUnknownLossType {
		t.Errorf("unknown type: %v", err)
	}
	bad.Loss.Type = new(trainer.LossGRPO)
	if r, err := e.GRPOStep(ctx, bad); err != nil || r.Replayed || r.PolicyVersion != 2 {
		t.Errorf("retry after a failure: %+v %v", r, err)
	}
}

func TestStepLogEviction(t *testing.T) {
	l := newStepLog(2)
	h := [32]byte{}
	l.store("a", "save", h, 1)
	l.store("b", "save", h, 2)
	l.store("c", "save", h, 3)
	if r, _ := l.lookup("a", "save", h); r != nil {
		t.Error("oldest entry kept past capacity")
	}
	if r, _ := l.lookup("c", "save", h); r != 3 {
		t.Errorf("newest entry: %v", r)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	if _, err := e.SFTStep(ctx, trainer.SFTRequest{StepID: "sft", Examples: sftBatch(), LearningRate: 0.1}); err != nil {
		t.Fatal(err)
	}
	res, _ := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze(), coffee()}, N: 2, Temperature: 1, Seed: 9})
	var samples []trainer.GRPOSample
	for k, s := range res.Samples {
		samples = append(samples, trainer.GRPOSample{Prompt: []trainer.Prompt{bronze(), coffee()}[s.PromptIndex], TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: float64(k) - 1.5})
	}
	lc := trainer.LossConfig{Type: new(trainer.LossDAPO), LearningRate: new(0.03), KLCoef: new(0.05), Mu: new(2), ClipHigh: new(0.28)}
	if _, err := e.GRPOStep(ctx, trainer.GRPORequest{StepID: "g1", Samples: samples, Loss: lc}); err != nil {
		t.Fatal(err)
	}
	saved := e.st.clone()
	sv, err := e.Save(ctx, trainer.SaveRequest{StepID: "save", Name: "ck-1"})
	if err != nil || sv.PolicyVersion != 2 || sv.SizeBytes <= 0 {
		t.Fatalf("save: %+v %v", sv, err)
	}
	next, _ := e.GRPOStep(ctx, trainer.GRPORequest{StepID: "g2", Samples: samples, Loss: lc})
	afterNext := e.st.clone()

	ld, err := e.Load(ctx, trainer.LoadRequest{StepID: "load", Name: "ck-1"})
	if err != nil || ld.PolicyVersion != 2 {
		t.Fatalf("load: %+v %v", ld, err)
	}
	if !reflect.DeepEqual(e.st, saved) {
		t.Fatalf("loaded state differs:\n%+v\n%+v", e.st, saved)
	}
	// The same update from the restored state lands on the same bits.
	again, _ := e.GRPOStep(ctx, trainer.GRPORequest{StepID: "g2-again", Samples: samples, Loss: lc})
	again.Replayed = next.Replayed
	if !reflect.DeepEqual(again, next) || !reflect.DeepEqual(e.st, afterNext) {
		t.Error("update after load differs from the update after save")
	}
	// A fresh policy loads it too (checkpoint dir shared).
	f, _ := New(e.cfg, nil)
	if _, err := f.Load(ctx, trainer.LoadRequest{StepID: "l", Name: "ck-1"}); err != nil || !reflect.DeepEqual(f.st, saved) {
		t.Errorf("fresh load: %v", err)
	}
	list, err := e.Checkpoints(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "ck-1" || list[0].PolicyVersion != 2 || list[0].SizeBytes != sv.SizeBytes {
		t.Errorf("checkpoints: %+v %v", list, err)
	}
	if _, err := e.Load(ctx, trainer.LoadRequest{StepID: "l2", Name: "nope"}); trainer.ErrorCode(err) != trainer.CodeNotFound {
		t.Errorf("missing checkpoint: %v", err)
	}
	if _, err := e.Save(ctx, trainer.SaveRequest{StepID: "s2", Name: "../escape"}); trainer.ErrorCode(err) != trainer.CodeInvalidArgument {
		t.Errorf("bad name: %v", err)
	}
	// A damaged file is refused with the file and field named.
	path := filepath.Join(e.cfg.CheckpointDir, "bad.json")
	if err := os.WriteFile(path, []byte(`{"format":"himes-embedded-policy/1","features":["bias"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = e.Load(ctx, trainer.LoadRequest{StepID: "l3", Name: "bad"})
	var pe *trainer.Error
	if !errors.As(err, &pe) || !strings.Contains(pe.Message, "bad.json: field features") {
		t.Errorf("damaged checkpoint: %v", err)
	}
}

func TestEmbeddedConfigValidate(t *testing.T) {
	cfg := trainer.DefaultEmbeddedConfig()
	cfg.AdamBeta2 = 1
	if _, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "adam_beta2") {
		t.Errorf("beta2 = 1: %v", err)
	}
	cfg = trainer.DefaultEmbeddedConfig()
	cfg.SampleCalibration = "temperature"
	if _, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "sample_calibration") {
		t.Errorf("sample_calibration temperature: %v", err)
	}
	c := trainer.DefaultConfig()
	c.Endpoint = "ftp://x"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "endpoint") {
		t.Errorf("ftp endpoint: %v", err)
	}
	c.Endpoint = "http://127.0.0.1:8765"
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestSampleRejectsBadRequests(t *testing.T) {
	e := newTestEmbedded(t, nil)
	p := []trainer.Prompt{bronze()}
	for _, c := range []struct {
		req   trainer.SampleRequest
		field string
	}{
		{trainer.SampleRequest{}, "prompts"},
		{trainer.SampleRequest{Prompts: p, N: -1}, "n"},
		{trainer.SampleRequest{Prompts: p, Temperature: -0.5}, "temperature"},
		{trainer.SampleRequest{Prompts: p, TopP: 1.5}, "top_p"},
		{trainer.SampleRequest{Prompts: p, MaxTokens: -3}, "max_tokens"},
	} {
		_, err := e.Sample(context.Background(), c.req)
		if trainer.ErrorCode(err) != trainer.CodeInvalidArgument || !strings.HasPrefix(err.Error(), c.field+":") {
			t.Errorf("%+v: %v, want invalid_argument naming %s", c.req, err, c.field)
		}
	}
	_, err := e.GRPOStep(context.Background(), trainer.GRPORequest{StepID: "x", Loss: trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(1.0)},
		Samples: []trainer.GRPOSample{{Prompt: bronze(), TokenIDs: []int{1, 0}, OldLogprobs: []float64{-0.1}}}})
	if want := "samples[0].old_logprobs: length 1, want 2 (len(token_ids))"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
	_, err = e.GRPOStep(context.Background(), trainer.GRPORequest{StepID: "x", Loss: trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(1.0)},
		Samples: []trainer.GRPOSample{{Prompt: bronze(), TokenIDs: []int{2}, OldLogprobs: []float64{-0.1}}}})
	if want := "samples[0].token_ids[0]: 2 is not a decision (0 drop, 1 keep)"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

// TestConcurrentSameStepID sends one grpo_step from several goroutines at
// once: it is applied exactly once and every caller gets its result.
func TestConcurrentSameStepID(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	res, _ := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze()}, Temperature: 1, Seed: 3})
	s := res.Samples[0]
	req := trainer.GRPORequest{StepID: "same", Samples: []trainer.GRPOSample{{Prompt: bronze(), TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: 1}},
		Loss: trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(0.1)}}
	const n = 8
	var wg sync.WaitGroup
	out := make([]trainer.GRPOResponse, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Interleave reads with the updates.
			if _, err := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{coffee()}, N: 2, Temperature: 1}); err != nil {
				errs[i] = err
				return
			}
			out[i], errs[i] = e.GRPOStep(ctx, req)
		}()
	}
	wg.Wait()
	applied := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !out[i].Replayed {
			applied++
		}
		if out[i].PolicyVersion != 1 {
			t.Errorf("caller %d saw version %d", i, out[i].PolicyVersion)
		}
	}
	if applied != 1 || e.st.version != 1 {
		t.Errorf("applied %d times, version %d", applied, e.st.version)
	}
}
