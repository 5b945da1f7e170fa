package embedded

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/himes-rl/himes/trainer"
)

// grove is a dialogue with two kinds of candidate terms, each kind sharing
// one feature row: hazel and ivory (the last user turn) and eight assistant
// terms of one length, none capitalized, all among its first 12 words. The
// policy can fit one free logit per kind.
func grove() trainer.Prompt {
	return trainer.Prompt{ID: "grove", Dialogue: &trainer.Dialogue{
		History: []trainer.Message{
			{Role: "user", Content: "tell me about hazel and ivory"},
			{Role: "assistant", Content: "the amber basil cedar delta ember flint grove haven"},
		},
		Question: "what else?",
	}}
}

var groveAssistant = []string{"amber", "basil", "cedar", "delta", "ember", "flint", "grove", "haven"}

// calibrationBatch is 16 copies of grove() whose completions keep hazel and
// ivory in 12 (q = ¾) and each assistant term in 1 (q = 1/16).
func calibrationBatch() []trainer.SFTExample {
	var exs []trainer.SFTExample
	for c := range 16 {
		completion := "what else"
		if c < 12 {
			completion += " hazel ivory"
		}
		if c < len(groveAssistant) {
			completion += " " + groveAssistant[c]
		}
		exs = append(exs, trainer.SFTExample{Prompt: grove(), Completion: completion})
	}
	return exs
}

// keepProbs is the policy's T = 1 sampling probability of keeping each of
// the prompt's candidates (exp of the logprob of decision 1).
func keepProbs(t *testing.T, e *Policy, p trainer.Prompt, n int) []float64 {
	t.Helper()
	ones := make([]int, n)
	for k := range ones {
		ones[k] = 1
	}
	lp, err := e.Logprobs(context.Background(), trainer.LogprobsRequest{Items: []trainer.LogprobsItem{{Prompt: p, TokenIDs: ones}}, Temperature: 1})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, n)
	for k, x := range lp.Logprobs[0] {
		out[k] = math.Exp(x)
	}
	return out
}

// greedyKept is the greedy rewrite's decisions for p.
func greedyKept(t *testing.T, e *Policy, p trainer.Prompt) []int {
	t.Helper()
	res, err := e.Sample(context.Background(), trainer.SampleRequest{Prompts: []trainer.Prompt{p}, N: 1, Temperature: 0})
	if err != nil {
		t.Fatal(err)
	}
	return res.Samples[0].TokenIDs
}

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

// After SFT with keep weight w = 5 on a batch with known keep rates q, the
// weighted fit is σ(z) = w·q/(w·q + 1 − q) per kind of candidate (z = ln w +
// logit q). Greedy keeps z > 0, i.e. q > 1/(1+w) = 1/6: hazel and ivory (¾),
// 2 terms; the eight assistant terms (1/16) are dropped. With
// sample_calibration "prior" the samples keep each term with p = q, in
// expectation 2·¾ + 8/16 = 2 terms, greedy's count; with "none" with p =
// 15/16 and ¼, 2·15/16 + 8·¼ = 3.875 terms, twice greedy's: the mismatch
// issue 35 measured (5–6 words sampled where greedy adds 2).
func TestSFTPosWeightDoesNotShiftSamples(t *testing.T) {
	ctx := context.Background()
	exs := calibrationBatch()
	const w = 5.0
	terms := []string{"hazel", "ivory"} // then groveAssistant
	q := []float64{0.75, 0.75}
	for range groveAssistant {
		q = append(q, 1.0/16)
	}
	want := map[string]struct {
		p        func(q float64) float64
		expected float64
	}{
		trainer.SampleCalibrationPrior: {func(q float64) float64 { return q }, 2.0},
		trainer.SampleCalibrationNone:  {func(q float64) float64 { return w * q / (w*q + 1 - q) }, 3.875},
	}
	for _, mode := range []string{trainer.SampleCalibrationPrior, trainer.SampleCalibrationNone} {
		cfg := trainer.DefaultEmbeddedConfig()
		cfg.CheckpointDir = t.TempDir()
		cfg.SFTPosWeight = w
		cfg.SampleCalibration = mode
		e, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		cands, _ := candidates(contextOf(grove()), nil, 64)
		var got []string
		for _, c := range cands {
			got = append(got, c.term)
		}
		if fmt.Sprint(got) != fmt.Sprint(append(terms, groveAssistant...)) {
			t.Fatalf("grove's candidates %v, want %v", got, append(terms, groveAssistant...))
		}
		if _, err := e.SFTStep(ctx, trainer.SFTRequest{StepID: "fit", Examples: exs, LearningRate: 0.05, Epochs: 3000}); err != nil {
			t.Fatal(err)
		}
		p := keepProbs(t, e, grove(), len(q))
		for k := range q {
			if pk, wantP := p[k], want[mode].p(q[k]); math.Abs(pk-wantP) > 0.005 {
				t.Errorf("%s: %s (q = %v): sampled p(keep) %.4f, want %.4f", mode, got[k], q[k], pk, wantP)
			}
		}
		if got := sum(p); math.Abs(got-want[mode].expected) > 0.02 {
			t.Errorf("%s: expected kept terms %.3f, want %.3f", mode, got, want[mode].expected)
		}
		// The weight moves the greedy decision only: the same in both modes.
		if g := greedyKept(t, e, grove()); fmt.Sprint(g) != fmt.Sprint([]int{1, 1, 0, 0, 0, 0, 0, 0, 0, 0}) {
			t.Errorf("%s: greedy decisions %v, want hazel and ivory only", mode, g)
		}
		if mode == trainer.SampleCalibrationPrior {
			checkOffsetCarried(t, e, cfg, p)
		}
	}
}

// checkOffsetCarried: samples' logprobs are the scored ones, and a
// checkpoint carries the sampling offset (a policy loaded from it samples
// with the same probabilities).
func checkOffsetCarried(t *testing.T, e *Policy, cfg trainer.EmbeddedConfig, p []float64) {
	t.Helper()
	ctx := context.Background()
	res, err := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{grove()}, N: 4, Temperature: 1, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Samples {
		lp, err := e.Logprobs(ctx, trainer.LogprobsRequest{Items: []trainer.LogprobsItem{{Prompt: grove(), TokenIDs: s.TokenIDs}}, Temperature: 1})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(lp.Logprobs[0]) != fmt.Sprint(s.Logprobs) {
			t.Errorf("sample %d: sampled logprobs %v, scored %v", s.SampleIndex, s.Logprobs, lp.Logprobs[0])
		}
	}
	if _, err := e.Save(ctx, trainer.SaveRequest{StepID: "save", Name: "calibrated"}); err != nil {
		t.Fatal(err)
	}
	fresh, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Load(ctx, trainer.LoadRequest{StepID: "load", Name: "calibrated"}); err != nil {
		t.Fatal(err)
	}
	if got := keepProbs(t, fresh, grove(), len(p)); fmt.Sprint(got) != fmt.Sprint(p) {
		t.Errorf("loaded policy samples with p %v, saved %v", got, p)
	}
}
