package rollout

import (
	"context"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/retrieval"
)

type fixedResponder string

func (f fixedResponder) Name() string { return "fixed" }
func (f fixedResponder) Respond(context.Context, string, []retrieval.Ranked) (string, error) {
	return string(f), nil
}

// The reward of a turn with several reference answers is the best match:
// answering "paris" scores Rouge-L 1 and EM 1 against the second reference,
// where the first alone ("lyon") would give 0.
func TestRunnerScoresAgainstEveryReference(t *testing.T) {
	sc, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := newTestRunner(t, DefaultConfig(), &fakeRetriever{}, fixedResponder("Paris"), sc)
	g := Group{PromptID: "p", Turn: datasets.Turn{ConvID: "c", Turn: 1, Question: "where", Answer: "lyon", Answers: []string{"lyon", "paris"}, User: "u"},
		Samples: []Sample{{Index: 0, Rewrite: "where"}}}
	recs, _, err := r.Run(context.Background(), 1, []Group{g})
	if err != nil {
		t.Fatal(err)
	}
	if got := recs[0]; got.RougeF1 != 1 || got.EM != 1 || got.Reward < 2 {
		t.Fatalf("rougeL_f1 %v em %v reward %v, want 1, 1 and ≥ 2", got.RougeF1, got.EM, got.Reward)
	}
}
