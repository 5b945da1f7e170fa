package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/himes-rl/himes/retrieval"
)

// flakyBatchRetriever is fakeRetriever with a RetrieveBatch in which every
// rewrite containing "STALL" fails (a search node stalled during the batch),
// while a call of its own for the same rewrite succeeds unless it also
// contains "FAIL".
type flakyBatchRetriever struct {
	fakeRetriever
	batches atomic.Int64
}

func (f *flakyBatchRetriever) RetrieveBatch(ctx context.Context, reqs []retrieval.Request) ([]retrieval.Result, []error) {
	f.batches.Add(1)
	res := make([]retrieval.Result, len(reqs))
	errs := make([]error, len(reqs))
	for i, q := range reqs {
		if strings.Contains(q.Rewrite, "STALL") {
			errs[i] = errors.New("search node timed out")
			continue
		}
		res[i], errs[i] = f.fakeRetriever.Retrieve(ctx, q.User, q.Rewrite, q.Query)
	}
	return res, errs
}

// A rewrite whose batched retrieval failed is retried on its own before the
// rollout counts as failed: the step's records equal those of a batch that
// never failed, and only a rewrite whose own call fails too is a failure.
func TestRunRetriesFailedBatchItemsOnTheirOwn(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Concurrency = 2
	rws := []string{"alpha one", "STALL beta", "gamma three", "STALL FAIL delta"}
	ret := &flakyBatchRetriever{}
	r := newTestRunner(t, cfg, ret, &fakeResponder{}, &fakeScorer{})
	recs, st, err := r.Run(t.Context(), 0, []Group{group("g", "q", rws...)})
	if err != nil {
		t.Fatal(err)
	}
	if ret.batches.Load() != 1 {
		t.Fatalf("RetrieveBatch called %d times, want 1", ret.batches.Load())
	}
	// 4 rewrites: 2 retrieved in the batch (calls 1, 2), 2 retried on their own (3, 4).
	if got := ret.calls.Load(); got != 4 {
		t.Errorf("Retrieve calls %d, want 4 (2 in the batch, 2 retries)", got)
	}
	want := []string{"q|c-alpha", "q|c-stall", "q|c-gamma", ""}
	for i, rec := range recs {
		if rec.Answer != want[i] {
			t.Errorf("record %d (%q) answer %q, want %q", i, rws[i], rec.Answer, want[i])
		}
	}
	if recs[1].Error != "" {
		t.Errorf("the retried rewrite still failed: %q", recs[1].Error)
	}
	if !strings.Contains(recs[3].Error, "index exploded") {
		t.Errorf("a rewrite whose own call fails too must keep that call's error, got %q", recs[3].Error)
	}
	if st.Failed != 1 {
		t.Errorf("failed rollouts %d, want 1", st.Failed)
	}
}

// The retry is bounded by the runner's concurrency.
func TestRunBatchRetriesAreBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Concurrency = 3
	var rws []string
	for i := range 12 {
		rws = append(rws, fmt.Sprintf("STALL r%d", i))
	}
	ret := &flakyBatchRetriever{}
	r := newTestRunner(t, cfg, ret, &fakeResponder{}, &fakeScorer{})
	_, st, err := r.Run(t.Context(), 0, []Group{group("g", "q", rws...)})
	if err != nil {
		t.Fatal(err)
	}
	if st.Failed != 0 {
		t.Errorf("failed %d, want 0", st.Failed)
	}
	if p := ret.peak.Load(); p > 3 {
		t.Errorf("peak concurrency of the retries %d exceeds the limit 3", p)
	}
}
