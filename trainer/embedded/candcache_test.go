package embedded

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/himes-rl/himes/trainer"
)

// The key must tell apart contexts that concatenate to the same text: a
// shared entry between them would hand one prompt the other's candidates.
func TestCandKeySeparatesBoundaries(t *testing.T) {
	mk := func(hist []string, q string, mem ...trainer.DialogueMemory) rewriteContext {
		var h []trainer.Message
		for _, s := range hist {
			h = append(h, trainer.Message{Role: "user", Content: s})
		}
		return rewriteContext{history: h, question: q, memories: mem}
	}
	contexts := []rewriteContext{
		mk([]string{"bronze age", "collapse"}, "why"),
		mk([]string{"bronze", "age collapse"}, "why"),
		mk([]string{"bronze age collapse"}, "why"),
		mk([]string{"bronze age collapse", ""}, "why"),
		mk([]string{"bronze age"}, "collapse why"),
		mk(nil, "bronze age collapse why"),
		mk(nil, "why", trainer.DialogueMemory{ID: "a", Text: "bronze", Score: 0.5}),
		mk(nil, "why", trainer.DialogueMemory{ID: "a", Text: "bronze", Score: 0.25}),
		mk(nil, "why", trainer.DialogueMemory{ID: "ab", Text: "ronze", Score: 0.5}),
	}
	asst := mk([]string{"bronze age", "collapse"}, "why")
	asst.history[0].Role = "assistant"
	contexts = append(contexts, asst)
	seen := map[candKey]int{}
	for i, c := range contexts {
		k := keyOf(c, 32)
		if j, ok := seen[k]; ok {
			t.Fatalf("contexts %d and %d share a key", j, i)
		}
		seen[k] = i
	}
	if keyOf(contexts[0], 32) == keyOf(contexts[0], 16) {
		t.Fatal("the candidate cap is not part of the key")
	}
}

// A cached entry is exactly what candidates computes, for every cap.
func TestCandCacheEqualsRecomputation(t *testing.T) {
	cc := newCandCache()
	stats := mapStats{"bronze": 2, "collapse": 3, "espresso": 1.5}
	for _, p := range []trainer.Prompt{bronze(), coffee(), bronzeWithMemories()} {
		for _, limit := range []int{1, 3, 64} {
			want, wantTrunc := candidates(contextOf(p), stats, limit)
			for range 2 { // a miss, then a hit
				got := cc.get(contextOf(p), stats, limit)
				if !reflect.DeepEqual(got.cands, want) || got.truncated != wantTrunc {
					t.Fatalf("%s, cap %d: cached candidates differ from candidates()", p.ID, limit)
				}
				if !reflect.DeepEqual(got.phi, design(want)) {
					t.Fatalf("%s, cap %d: cached design matrix differs", p.ID, limit)
				}
			}
		}
	}
}

// Two generations bound the cache: it never holds more than 2 × its size.
func TestCandCacheIsBounded(t *testing.T) {
	cc := newCandCache()
	for i := range 3*candCacheSize + 7 {
		cc.get(rewriteContext{question: fmt.Sprintf("q%d", i)}, nil, 8)
		if n := len(cc.cur) + len(cc.prev); n > 2*candCacheSize {
			t.Fatalf("after %d prompts the cache holds %d entries, over 2 × %d", i+1, n, candCacheSize)
		}
	}
}

// Memoization changes no result: the same requests to a policy whose
// cache is warm (every prompt seen before, in another order) and to a
// fresh one give identical samples, logprobs and updates.
func TestCandCacheChangesNoResult(t *testing.T) {
	newPolicy := func() *Policy {
		cfg := trainer.DefaultEmbeddedConfig()
		cfg.CheckpointDir = t.TempDir()
		e, err := New(cfg, mapStats{"bronze": 2, "collapse": 3})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	run := func(e *Policy) (trainer.SampleResponse, trainer.GRPOResponse, []float64) {
		ctx := context.Background()
		prompts := []trainer.Prompt{bronze(), coffee(), bronzeWithMemories()}
		s, err := e.Sample(ctx, trainer.SampleRequest{Prompts: prompts, N: 4, Temperature: 1, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		var batch []trainer.GRPOSample
		for k, x := range s.Samples {
			batch = append(batch, trainer.GRPOSample{Prompt: prompts[x.PromptIndex], TokenIDs: x.TokenIDs, OldLogprobs: x.Logprobs, Advantage: float64(k%3) - 1})
		}
		g, err := e.GRPOStep(ctx, trainer.GRPORequest{StepID: "s1", Samples: batch,
			Loss: trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(1e-2), KLCoef: new(0.04), Mu: new(2)}})
		if err != nil {
			t.Fatal(err)
		}
		return s, g, e.Weights()
	}
	fresh := newPolicy()
	warm := newPolicy()
	for _, p := range []trainer.Prompt{bronzeWithMemories(), coffee(), bronze()} {
		warm.cands.get(contextOf(p), warm.stats, warm.cfg.MaxCandidates)
	}
	s1, g1, w1 := run(fresh)
	s2, g2, w2 := run(warm)
	if !reflect.DeepEqual(s1, s2) || !reflect.DeepEqual(g1, g2) || !reflect.DeepEqual(w1, w2) {
		t.Fatal("a warm candidate cache changed the samples, the update or the weights")
	}
}
