package embedded

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/trainer"
)

// loadRewriteTurns reads turns that have history and a human rewrite.
func loadRewriteTurns(t *testing.T, path string) []trainer.SFTExample {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []trainer.SFTExample
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		var rec struct {
			History  []struct{ Role, Text string }
			Question string
			Rewrite  *string
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%s:%d: %v", path, line, err)
		}
		if rec.Rewrite == nil || len(rec.History) == 0 {
			continue
		}
		d := &trainer.Dialogue{Question: rec.Question}
		for _, m := range rec.History {
			d.History = append(d.History, trainer.Message{Role: m.Role, Content: m.Text})
		}
		out = append(out, trainer.SFTExample{Prompt: trainer.Prompt{Dialogue: d}, Completion: *rec.Rewrite})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// selectionF1 is the micro F1 of the greedily kept terms against the
// candidates that occur in the human rewrite.
func selectionF1(t *testing.T, e *Policy, exs []trainer.SFTExample, keepAll bool) float64 {
	t.Helper()
	var prompts []trainer.Prompt
	for _, ex := range exs {
		prompts = append(prompts, ex.Prompt)
	}
	res, err := e.Sample(context.Background(), trainer.SampleRequest{Prompts: prompts, Temperature: 0})
	if err != nil {
		t.Fatal(err)
	}
	var tp, fp, fn float64
	for k, s := range res.Samples {
		in := map[string]bool{}
		for _, w := range Tokens(exs[k].Completion) {
			in[w] = true
		}
		cands, _ := candidates(contextOf(exs[k].Prompt), nil, e.cfg.MaxCandidates)
		for i, c := range cands {
			keep := keepAll || s.TokenIDs[i] == 1
			switch {
			case keep && in[c.term]:
				tp++
			case keep:
				fp++
			case in[c.term]:
				fn++
			}
		}
	}
	return 2 * tp / (2*tp + fp + fn)
}

// TestSFTLearnsTermSelectionOnCAsT trains on CAsT 2020's human rewrites and
// evaluates on CAsT 2021: the selector must clearly beat keeping every
// candidate (measured: F1 0.065 keep-all, 0.228 trained).
func TestSFTLearnsTermSelectionOnCAsT(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): trains the term selector on CAsT 2020 and evaluates on CAsT 2021")
	}
	data := sharedtest.SharedDir(t)
	train := loadRewriteTurns(t, filepath.Join(data, "conversations", "cast2020.jsonl"))
	eval := loadRewriteTurns(t, filepath.Join(data, "conversations", "cast2021.jsonl"))
	e := newTestEmbedded(t, nil)
	before := selectionF1(t, e, eval, true)
	r, err := e.SFTStep(context.Background(), trainer.SFTRequest{StepID: "cast", Examples: train, LearningRate: 0.2, Epochs: 150})
	if err != nil {
		t.Fatal(err)
	}
	after := selectionF1(t, e, eval, false)
	t.Logf("CAsT 2020 → 2021: %d train / %d eval turns, mean train BCE %.4f, selection F1 keep-all %.3f → trained %.3f; weights %v",
		len(train), len(eval), r.Loss, before, after, e.Weights())
	if !(after > before+0.1) {
		t.Errorf("trained selection F1 %.3f does not beat keeping every candidate (%.3f)", after, before)
	}
}
