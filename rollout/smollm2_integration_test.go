package rollout

// The frozen responder with a real instruction-tuned model: SmolLM2-135M-
// Instruct (the GGUF that scripts/ci/setup-smollm2.sh installs from PyPI)
// served by a real Ollama v0.6.5. Unlike the tiny random model of the other
// integration tests, its answers can be checked for content: each question is
// answerable from one short passage, and the answer must contain the fact.
// Skips without ollama or the GGUF; fails instead under CI=true.

import (
	"strings"
	"testing"

	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/ollamatest"
	"github.com/himes-rl/himes/retrieval"
)

func TestSmolLM2Responder(t *testing.T) {
	gguf := ollamatest.SmolLM2GGUF(t)
	s := ollamatest.Start(t)
	// The file's chat template is ChatML; Ollama recognizes it and renders
	// the responder's system and user messages with it.
	s.Create(t, "smollm2", "FROM "+gguf+"\n")
	cfg := realCfg(s)
	cfg.Ollama.Model = "smollm2"
	cfg.Ollama.NumCtx = 2048
	cfg.Ollama.NumPredict = 48
	ctx := t.Context()
	resp, err := NewResponder(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\nserver log:\n%s", err, s.Log())
	}
	o := resp.(*Ollama)
	defer o.Close()

	cases := []struct{ question, passage, fact string }{
		{"What is the capital of France?", "Paris is the capital and most populous city of France.", "paris"},
		{"Who wrote Pride and Prejudice?", "Pride and Prejudice is an 1813 novel of manners written by Jane Austen.", "austen"},
		{"When did the Berlin Wall fall?", "The Berlin Wall fell on 9 November 1989, opening the border between East and West Berlin.", "1989"},
	}
	sc, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		chunks := []retrieval.Ranked{{Chunk: retrieval.Chunk{ID: "p#0", Text: c.passage}, Score: 1}}
		answer, err := o.Respond(ctx, c.question, chunks)
		if err != nil {
			t.Fatalf("%q: %v\nserver log:\n%s", c.question, err, s.Log())
		}
		if !strings.Contains(strings.ToLower(answer), c.fact) {
			t.Errorf("%q: answer %q does not contain %q, which the passage states", c.question, answer, c.fact)
		}
		score := sc.Score(answer, c.fact, []string{c.passage})
		t.Logf("%q -> %q (Rouge-L F1 vs %q: %.2f, hit %.0f)", c.question, answer, c.fact, score.RougeF1, score.Hit)
		if i == 0 {
			// Temperature 0 with a seed: asked again, the same answer. The
			// first call ran with a cold prompt cache, every later one
			// reuses the cached prefix, and llama.cpp's batched prompt pass
			// and its one-token pass round differently: with the
			// x86-64-v3 build (scripts/ci/setup-ollama.sh) the cold answer
			// and the warm ones part mid-sentence. So the determinism
			// checked is that of the steady state: two warm calls agree.
			warm, err := o.Respond(ctx, c.question, chunks)
			if err != nil {
				t.Fatalf("%q again: %v", c.question, err)
			}
			again, err := o.Respond(ctx, c.question, chunks)
			if err != nil || again != warm {
				t.Errorf("answer changed: %q vs %q (%v)", again, warm, err)
			}
			if warm != answer {
				t.Logf("the cold-cache answer differs from the warm ones: %q vs %q", answer, warm)
			}
		}
	}
}
