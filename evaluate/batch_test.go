package evaluate

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/retrieval"
)

// batchRank is rankRetriever that also takes batches, recording each.
type batchRank struct {
	*rankRetriever
	mu      sync.Mutex
	batches [][]retrieval.Request
}

func (b *batchRank) RetrieveBatch(ctx context.Context, reqs []retrieval.Request) ([]retrieval.Result, []error) {
	b.mu.Lock()
	b.batches = append(b.batches, reqs)
	b.mu.Unlock()
	res := make([]retrieval.Result, len(reqs))
	errs := make([]error, len(reqs))
	for i, r := range reqs {
		res[i], errs[i] = b.Retrieve(ctx, r.User, r.Rewrite, r.Query)
	}
	return res, errs
}

// A retriever that takes batches gets every turn of every system using it
// in one call (rewrite failures left out, retrieval failures kept per
// turn), and the evaluation is the one of turn-by-turn retrieval but for
// the timings.
func TestEvaluateBatchesRetrievalSameResults(t *testing.T) {
	runs := map[string][]string{}
	var turns []datasets.Turn
	rel := 1
	for c := range 6 {
		for k := 1; k <= 3; k++ {
			q := fmt.Sprintf("q%d-%d", c, k)
			gold := "g" + q
			turns = append(turns, datasets.Turn{ConvID: fmt.Sprintf("conv%02d", c), Turn: k, Question: q, User: fmt.Sprintf("u%d", c),
				Answer: "text of " + gold, Passages: []datasets.PassageRef{{ID: gold, Relevance: &rel}}})
			runs[q] = []string{"x1", "x2", gold, "x3"}
			if q != "q2-2" { // better's rewrite of q2-2 fails to retrieve
				runs["good:"+q] = []string{gold, "x1", "x2", "x3"}
			}
		}
	}
	scorer, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Concurrency: 3, Stats: stats.Config{Resamples: 200, Level: 0.95, Seed: 1}}
	evaluate := func(ret retrieval.Retriever) (Report, [][]TurnResult) {
		systems := []System{
			{Name: "raw", Rewriter: Raw{}, Retriever: ret},
			{Name: "better", Rewriter: failOn{better{}, map[string]bool{"q0-1": true}}, Retriever: ret},
		}
		rep, res, err := Evaluate(t.Context(), turns, systems, firstChunk{}, scorer, opts)
		if err != nil {
			t.Fatal(err)
		}
		rep.Seconds = 0
		for _, r := range res {
			for i := range r {
				r[i].Seconds = 0
			}
		}
		return rep, res
	}
	wantRep, want := evaluate(&rankRetriever{runs: runs, k: 2})
	br := &batchRank{rankRetriever: &rankRetriever{runs: runs, k: 2}}
	gotRep, got := evaluate(br)
	if len(br.batches) != 1 || len(br.batches[0]) != 2*len(turns)-1 {
		t.Fatalf("%d batches, want 1 of %d requests", len(br.batches), 2*len(turns)-1)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("batched turn results differ from turn by turn")
	}
	if !reflect.DeepEqual(gotRep, wantRep) {
		t.Error("batched report differs from turn by turn")
	}
	b := gotRep.Systems[1]
	if b.Failures["rewrite"] != 1 || b.Failures["retrieve"] != 1 {
		t.Errorf("better's failures %v, want 1 rewrite and 1 retrieve", b.Failures)
	}

	// A batch that fails transiently (a search node stalled while it ran:
	// every other request times out) costs no turn: each failed one is
	// retried on its own, and the evaluation is turn by turn's again. The
	// turn whose own call fails too stays failed.
	flaky := &flakyBatch{batchRank: batchRank{rankRetriever: &rankRetriever{runs: runs, k: 2}}}
	gotRep, got = evaluate(flaky)
	if flaky.failedInBatch == 0 {
		t.Fatal("the flaky batch failed nothing: the test cannot tell a retry")
	}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotRep, wantRep) {
		t.Error("a batch with transient failures gives another evaluation than turn by turn")
	}
}

// flakyBatch fails every other request of a batch; single calls go through.
type flakyBatch struct {
	batchRank
	failedInBatch int
}

func (f *flakyBatch) RetrieveBatch(ctx context.Context, reqs []retrieval.Request) ([]retrieval.Result, []error) {
	res, errs := f.batchRank.RetrieveBatch(ctx, reqs)
	for i := range errs {
		if i%2 == 0 && errs[i] == nil {
			res[i], errs[i] = retrieval.Result{}, fmt.Errorf("timeout after 8 attempt(s): context deadline exceeded")
			f.failedInBatch++
		}
	}
	return res, errs
}
