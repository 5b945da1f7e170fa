package rollout

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/retrieval/service"
)

const demoKB = "../datasets/demo/passages.jsonl"

// badService serves the demo index over the retrieval protocol, except for
// queries that ask it to misbehave: "stranger" gets a document the
// knowledge base does not hold, "garbled" scores in ascending order, and a
// request holding "boom" a 500. It records the queries of every call.
type badService struct {
	*httptest.Server
	mu    sync.Mutex
	calls [][]string
}

func newBadService(t *testing.T) *badService {
	local, err := retrieval.Open(t.Context(), retrieval.DefaultConfig(), demoKB)
	if err != nil {
		t.Fatal(err)
	}
	good := service.NewHandler(local, 20)
	s := &badService{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req service.RetrieveRequest
		_ = json.Unmarshal(body, &req)
		s.mu.Lock()
		s.calls = append(s.calls, req.Queries)
		s.mu.Unlock()
		if strings.Contains(strings.Join(req.Queries, " "), "boom") {
			http.Error(w, `{"error": "out of memory"}`, http.StatusInternalServerError)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		good.ServeHTTP(rec, r)
		var resp service.RetrieveResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		for i, q := range req.Queries {
			list := resp.Result[i]
			switch {
			case strings.Contains(q, "stranger") && len(list) > 0:
				list[0].Document.ID, list[0].Document.PassageID = "not-in-the-kb", ""
			case strings.Contains(q, "garbled") && len(list) > 1:
				list[0], list[1] = list[1], list[0]
			}
		}
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *badService) reset() {
	s.mu.Lock()
	s.calls = nil
	s.mu.Unlock()
}

// TestRunThroughRetrievalService: a step's distinct rewrites go to the
// service in one request; answers that break the protocol fail their
// rollouts with a retrieval_* kind and are never answered or scored, while
// the rest of the step is scored as usual.
func TestRunThroughRetrievalService(t *testing.T) {
	svc := newBadService(t)
	cfg := retrieval.DefaultConfig()
	cfg.Method = retrieval.MethodRemote
	cfg.Remote.Call.URL = service.HostList{svc.URL}
	cfg.Remote.Call.Retries, cfg.Remote.Call.BackoffBase, cfg.Remote.Call.BackoffMax = 1, time.Millisecond, time.Millisecond
	p, err := retrieval.Open(t.Context(), cfg, demoKB) // the KB checks the service's ids
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	resp, sc := &fakeResponder{}, &fakeScorer{}
	rcfg := DefaultConfig()
	rcfg.Concurrency = 4
	rcfg.MaxFailedFraction = 1 // this test fails whole steps on purpose
	r := newTestRunner(t, rcfg, p, resp, sc)

	svc.reset()
	groups := []Group{
		group("a", "who was the president", "president of the united states", "President of the  United States", "stranger president"),
		group("b", "what is a test collection", "garbled test collection", "test collection relevance judgments"),
	}
	recs, st, err := r.Run(t.Context(), 1, groups)
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.calls) != 1 || len(svc.calls[0]) != 4 {
		t.Errorf("service calls %v: want one request with the step's 4 distinct rewrites", svc.calls)
	}
	wantKind := []string{"", "", KindRetrievalUnknownID, KindRetrievalMalformed, ""}
	for i, rec := range recs {
		if rec.ErrorKind != wantKind[i] {
			t.Errorf("record %d (%q): kind %q (%s), want %q", i, rec.Rewrite, rec.ErrorKind, rec.Error, wantKind[i])
		}
		if rec.Failed() && (rec.Reward != 0 || rec.Answer != "" || len(rec.ChunkIDs) != 0) {
			t.Errorf("record %d: a failed rollout carries reward %v, answer %q, chunks %v", i, rec.Reward, rec.Answer, rec.ChunkIDs)
		}
		if !rec.Failed() && (len(rec.ChunkIDs) != 3 || rec.Reward == 0) {
			t.Errorf("record %d: %d chunks, reward %v; want the top 3 scored", i, len(rec.ChunkIDs), rec.Reward)
		}
	}
	if !strings.Contains(recs[2].Error, `"not-in-the-kb"`) || !strings.Contains(recs[3].Error, "descending") {
		t.Errorf("errors do not say what was wrong: %q, %q", recs[2].Error, recs[3].Error)
	}
	if st.Failed != 2 || sc.calls != 3 || resp.calls.Load() != 2 {
		t.Errorf("failed %d, scored %d, responder calls %d: want 2 failed, 3 scored (one deduplicated), 2 answered",
			st.Failed, sc.calls, resp.calls.Load())
	}

	// A call that fails (after its retry) fails its batch; each of its
	// rollouts is then retried on a call of its own, so only the rewrite the
	// service cannot answer fails: 2 attempts for the batch, 2 for "boom"
	// alone, 1 for "fine rewrite" alone.
	svc.reset()
	recs, st, err = r.Run(t.Context(), 2, []Group{group("c", "q", "boom", "fine rewrite")})
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].ErrorKind != KindRetrievalUnavailable || !strings.Contains(recs[0].Error, "out of memory") {
		t.Errorf("record 0: kind %q (%s), want %s with the server's message", recs[0].ErrorKind, recs[0].Error, KindRetrievalUnavailable)
	}
	if recs[1].Failed() || len(recs[1].ChunkIDs) != 3 {
		t.Errorf("record 1: %q, %d chunks: want it retrieved on its own call", recs[1].Error, len(recs[1].ChunkIDs))
	}
	if st.Failed != 1 || len(svc.calls) != 5 {
		t.Errorf("failed %d after %d calls: want 1 failed after 5 (2 for the batch, 2 for boom, 1 for the other)", st.Failed, len(svc.calls))
	}
}
