package rollout_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rollout"
)

// kbRetriever returns the passage about the rewrite's subject.
type kbRetriever map[string]string

func (kb kbRetriever) Retrieve(_ context.Context, _, rewrite, _ string) (retrieval.Result, error) {
	var res retrieval.Result
	for id, text := range kb {
		if id == rewrite {
			res.Chunks = append(res.Chunks, retrieval.Ranked{Chunk: retrieval.Chunk{ID: id, Text: text}, Score: 1})
		}
	}
	return res, nil
}

// One GRPO step's rollouts: two rewrites of "How tall is it?", one that
// resolves "it" and retrieves the right passage, one that does not.
func ExampleRunner() {
	kb := kbRetriever{
		"eiffel tower": "The Eiffel Tower is in Paris. It is 330 metres tall.",
		"it":           "It is a pronoun.",
	}
	scorer, _ := hser.NewScorer(hser.DefaultConfig()) // R = RougeL_F1 + EM + Hit
	cfg := rollout.DefaultConfig()                    // extractive responder
	resp, _ := rollout.NewResponder(context.Background(), cfg)
	runner, _ := rollout.NewRunner(cfg, kb, resp, scorer)

	turn := datasets.Turn{ConvID: "c1", Turn: 2, Question: "How tall is it?", Answer: "It is 330 metres tall."}
	groups := []rollout.Group{{PromptID: "c1#2", Turn: turn, Samples: []rollout.Sample{
		{Index: 0, Rewrite: "eiffel tower"},
		{Index: 1, Rewrite: "it"},
	}}}
	records, stats, err := runner.Run(context.Background(), 0, groups)
	if err != nil {
		panic(err)
	}
	// By hand: the first answer equals the reference (F1 1, EM 1) and occurs
	// in its chunk (Hit 1): 3. The second shares "it is" with the reference:
	// P 2/4, R 2/5, F1 4/9 ≈ 0.44, EM 0, Hit 1: 1.44.
	for _, r := range records {
		fmt.Printf("%q → %q reward %.2f\n", r.Rewrite, r.Answer, r.Reward)
	}
	fmt.Println("responder calls:", stats.ResponderCalls)

	path := filepath.Join(os.TempDir(), "example-rollouts.parquet")
	defer os.Remove(path)
	if err := rollout.WriteLedger(context.Background(), path, records); err != nil {
		panic(err)
	}
	back, _ := rollout.ReadLedger(context.Background(), path)
	fmt.Println("ledger rows:", len(back))
	// Output:
	// "eiffel tower" → "It is 330 metres tall." reward 3.00
	// "it" → "It is a pronoun." reward 1.44
	// responder calls: 2
	// ledger rows: 2
}
