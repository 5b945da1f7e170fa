package rollout

// Integration tests against a real Ollama server (internal/ollamatest: v0.6.5,
// built by scripts/ci/setup-ollama.sh, serving a tiny random-weight model).
// They check the plumbing; the model's output is gibberish. They skip when
// no ollama binary is found.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/ollamatest"
	"github.com/himes-rl/himes/retrieval"
)

func realCfg(s *ollamatest.Server) Config {
	cfg := DefaultConfig()
	cfg.Responder = "ollama"
	cfg.Ollama.Model = "tiny"
	cfg.Ollama.Hosts = []string{s.URL()}
	cfg.Ollama.NumThread = 1
	cfg.Ollama.NumCtx = 512
	cfg.Ollama.NumPredict = 16
	cfg.Ollama.Call.BackoffBase = 10 * time.Millisecond
	cfg.Ollama.Call.BackoffMax = 200 * time.Millisecond
	return cfg
}

func TestRealOllama(t *testing.T) {
	s := ollamatest.Start(t)
	ctx := t.Context()

	t.Run("chat, determinism and the runner", func(t *testing.T) {
		resp, err := NewResponder(ctx, realCfg(s))
		if err != nil {
			t.Fatalf("%v\nserver log:\n%s", err, s.Log())
		}
		o := resp.(*Ollama)
		defer o.Close()
		first, err := o.Respond(ctx, "How tall is the Eiffel Tower?", testChunks)
		if err != nil {
			t.Fatalf("%v\nserver log:\n%s", err, s.Log())
		}
		if first == "" {
			t.Error("empty answer from the model")
		}
		// Temperature 0 with a seed: the same prompt gives the same answer.
		for range 3 {
			again, err := o.Respond(ctx, "How tall is the Eiffel Tower?", testChunks)
			if err != nil || again != first {
				t.Fatalf("answer changed: %q vs %q (%v)", again, first, err)
			}
		}
		other, err := o.Respond(ctx, "Who designed it, and when was it finished?", testChunks)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("answers: %q / %q", first, other)

		// Through the runner with the real reward: every rollout answered and scored.
		sc, err := hser.NewScorer(hser.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewRunner(realCfg(s), staticRetriever{}, o, sc)
		if err != nil {
			t.Fatal(err)
		}
		recs, st, err := r.Run(ctx, 0, []Group{group("1", "How tall is the Eiffel Tower?", "eiffel tower height", "tower height", "Eiffel  Tower HEIGHT")})
		if err != nil {
			t.Fatal(err)
		}
		// staticRetriever returns the same chunks for every rewrite: one prompt, one call.
		if st.Failed != 0 || st.ResponderCalls != 1 || st.DedupHits != 1 || st.CacheHits != 1 {
			t.Errorf("stats %+v", st)
		}
		for _, rec := range recs {
			if rec.Answer != first {
				t.Errorf("runner answer %q, want the direct answer %q", rec.Answer, first)
			}
		}
	})

	t.Run("embed", func(t *testing.T) {
		o := newTestOllama(t, realCfg(s).Ollama)
		embs, err := o.Embed(ctx, []string{"hello world", "the eiffel tower"})
		if err != nil {
			t.Fatalf("%v\nserver log:\n%s", err, s.Log())
		}
		if len(embs) != 2 || len(embs[0]) != 64 || len(embs[1]) != 64 {
			t.Fatalf("embedding shapes: %d vectors", len(embs))
		}
		same := true
		for i := range embs[0] {
			same = same && embs[0][i] == embs[1][i]
		}
		if same {
			t.Error("different inputs gave the same embedding")
		}
	})

	t.Run("openai-compatible endpoint of the same server", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Responder = "openai"
		cfg.OpenAI.Model = "tiny"
		cfg.OpenAI.BaseURLs = []string{s.URL() + "/v1"}
		cfg.OpenAI.MaxTokens = 8
		resp, err := NewResponder(ctx, cfg)
		if err != nil {
			t.Fatalf("%v\nserver log:\n%s", err, s.Log())
		}
		a, err := resp.Respond(ctx, "How tall is the Eiffel Tower?", testChunks)
		if err != nil {
			t.Fatal(err)
		}
		b, err := resp.Respond(ctx, "How tall is the Eiffel Tower?", testChunks)
		if err != nil || a != b {
			t.Errorf("answers differ at temperature 0: %q vs %q (%v)", a, b, err)
		}
	})

	t.Run("missing model fails at start-up", func(t *testing.T) {
		cfg := realCfg(s)
		cfg.Ollama.Model = "no-such-model"
		_, err := NewResponder(ctx, cfg)
		want := "model no-such-model not found on host " + s.URL() + " — run `ollama pull no-such-model`"
		if err == nil || err.Error() != want {
			t.Errorf("err = %v\nwant %s", err, want)
		}
		// And mid-run (the model vanished after start-up): a 404 is fatal, not retried.
		o := newTestOllama(t, cfg.Ollama)
		_, err = o.Respond(ctx, "q", testChunks)
		var nf *ModelNotFoundError
		if !errors.As(err, &nf) {
			t.Errorf("chat with a missing model: %v", err)
		}
	})
}

// staticRetriever returns testChunks for any rewrite.
type staticRetriever struct{}

func (staticRetriever) Retrieve(context.Context, string, string, string) (retrieval.Result, error) {
	return retrieval.Result{Chunks: testChunks}, nil
}

// uniqueRetriever returns a chunk naming the rewrite, so every rewrite is its
// own prompt; onCall, when set, runs at the n-th retrieval (1-based).
type uniqueRetriever struct {
	n      atomic.Int64
	onCall func(n int64)
}

func (u *uniqueRetriever) Retrieve(_ context.Context, _, rewrite, _ string) (retrieval.Result, error) {
	n := u.n.Add(1)
	if u.onCall != nil {
		u.onCall(n)
	}
	return retrieval.Result{Chunks: []retrieval.Ranked{{Chunk: retrieval.Chunk{ID: rewrite, Text: "About " + rewrite + "."}}}}, nil
}

func TestRealOllamaBackPressure(t *testing.T) {
	// One slot and a queue of one: a burst of 24 gets 503 "maximum pending
	// requests exceeded"; retries with backoff must get every call through.
	s := ollamatest.Start(t, "OLLAMA_NUM_PARALLEL=1", "OLLAMA_MAX_QUEUE=1")
	cfg := realCfg(s)
	cfg.Ollama.NumPredict = 64
	cfg.Ollama.MaxPerHost = 24 // deliberately more than the server admits
	cfg.Ollama.Call.Retries = 100
	cfg.Ollama.Call.BackoffBase = 20 * time.Millisecond
	cfg.Ollama.Call.BackoffMax = 300 * time.Millisecond
	cfg.Concurrency = 24
	cfg.CacheSize = 0
	resp, err := NewResponder(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := resp.(*Ollama)
	defer o.Close()
	busy := &statusCounter{}
	o.client.WrapTransport(busy.wrap)
	r, err := NewRunner(cfg, &uniqueRetriever{}, o, mustScorer(t))
	if err != nil {
		t.Fatal(err)
	}
	var rws []string
	for i := range 24 {
		rws = append(rws, fmt.Sprintf("rewrite %d", i))
	}
	recs, st, err := r.Run(t.Context(), 0, []Group{group("1", "q", rws...)})
	if err != nil {
		t.Fatal(err)
	}
	if st.Failed != 0 || len(recs) != 24 || st.ResponderCalls != 24 {
		t.Errorf("stats %+v; first error %q", st, firstError(recs))
	}
	if busy.count(503) == 0 {
		t.Errorf("the burst never met a 503; statuses %v", busy.all())
	}
	t.Logf("burst of 24 on 1 slot + queue 1: statuses %v", busy.all())
}

func TestRealOllamaKilledMidRun(t *testing.T) {
	s := ollamatest.Start(t)
	cfg := realCfg(s)
	cfg.Concurrency = 4
	cfg.Ollama.MaxPerHost = 4
	cfg.Ollama.Call.Retries = 2
	cfg.Ollama.Call.BackoffBase = 5 * time.Millisecond
	cfg.Ollama.Call.BackoffMax = 20 * time.Millisecond
	resp, err := NewResponder(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := resp.(*Ollama)
	defer o.Close()
	var once sync.Once
	ret := &uniqueRetriever{}
	// Kill the server when the 9th retrieval starts: the earlier rollouts are
	// answered or in flight, the later ones meet a dead host.
	ret.onCall = func(n int64) {
		if n == 9 {
			once.Do(s.Stop)
		}
	}
	// Every failure is recorded here; the bound that stops a run is checked
	// below, on the dead server.
	lenient := cfg
	lenient.MaxFailedFraction = 1
	r, err := NewRunner(lenient, ret, o, mustScorer(t))
	if err != nil {
		t.Fatal(err)
	}
	var rws []string
	for i := range 24 {
		rws = append(rws, fmt.Sprintf("rewrite %d", i))
	}
	groups := []Group{group("1", "q", rws...)}
	recs, st, err := r.Run(t.Context(), 0, groups)
	if err != nil {
		t.Fatalf("a dead server must fail rollouts, not the run: %v", err)
	}
	// Concurrency 4: the 9th retrieval starts after at least 5 rollouts
	// finished (answered); rollouts 9–24 meet the dead server.
	if st.Failed < 16 || st.Failed > 19 {
		t.Errorf("stats %+v: want 16 to 19 failures after the kill", st)
	}
	for i, rec := range recs {
		if rec.Failed() {
			if rec.ErrorKind != KindUnavailable && rec.ErrorKind != KindTimeout {
				t.Errorf("record %d: kind %q (%s)", i, rec.ErrorKind, rec.Error)
			}
			if rec.Reward != 0 || rec.Answer != "" {
				t.Errorf("record %d failed but carries a reward or answer: %+v", i, rec)
			}
		}
	}
	t.Logf("killed mid-run: %d of %d failed; e.g. %q", st.Failed, st.Rollouts, firstError(recs))

	// With the default bound (half), a step against the dead server stops
	// the run instead of returning 24 failed rollouts.
	strict, err := NewRunner(cfg, &uniqueRetriever{}, o, mustScorer(t))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = strict.Run(t.Context(), 0, groups)
	var tmf *TooManyFailedError
	if !errors.As(err, &tmf) || !errors.Is(err, ErrTooManyFailed) || tmf.Failed != 24 || tmf.Total != 24 || tmf.Kinds[KindUnavailable] == 0 {
		t.Errorf("dead server under max_failed_fraction %v: got %v", cfg.MaxFailedFraction, err)
	}

	// Restart on the same port and model directory: the same step now succeeds.
	ret.onCall = nil
	s.Start()
	recs, st, err = r.Run(t.Context(), 1, groups)
	if err != nil {
		t.Fatal(err)
	}
	if st.Failed != 0 {
		t.Errorf("after restart: %d failed, first %q\nserver log:\n%s", st.Failed, firstError(recs), s.Log())
	}
}

func mustScorer(t *testing.T) *hser.Scorer {
	sc, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func firstError(recs []Record) string {
	for _, r := range recs {
		if r.Error != "" {
			return r.Error
		}
	}
	return ""
}

// statusCounter counts response statuses seen by a client.
type statusCounter struct {
	mu sync.Mutex
	m  map[int]int
}

func (c *statusCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err == nil {
			c.mu.Lock()
			if c.m == nil {
				c.m = map[int]int{}
			}
			c.m[resp.StatusCode]++
			c.mu.Unlock()
		}
		return resp, err
	})
}

func (c *statusCounter) count(code int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[code]
}

func (c *statusCounter) all() map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int]int{}
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
