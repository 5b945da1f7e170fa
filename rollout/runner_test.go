package rollout

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/memory"
	"github.com/himes-rl/himes/retrieval"
)

// fakeRetriever returns one chunk per rewrite, named after the rewrite's
// first word (case-folded), so rewrites sharing a first word retrieve the
// same chunk. A rewrite containing "FAIL" fails.
type fakeRetriever struct {
	calls    atomic.Int64
	inflight atomic.Int64
	peak     atomic.Int64
	gate     chan struct{} // when set, every call waits on it
}

func (f *fakeRetriever) Retrieve(ctx context.Context, user, rewrite, query string) (retrieval.Result, error) {
	f.calls.Add(1)
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return retrieval.Result{}, ctx.Err()
		}
	}
	if strings.Contains(rewrite, "FAIL") {
		return retrieval.Result{}, errors.New("index exploded")
	}
	w := strings.ToLower(strings.Fields(rewrite)[0])
	c := retrieval.Ranked{Chunk: retrieval.Chunk{ID: "c-" + w, Text: "text about " + w}, Score: float64(len(w))}
	return retrieval.Result{Chunks: []retrieval.Ranked{c}, Trace: retrieval.Trace{
		Memories: []memory.Activated{{Text: "earlier " + user, Sim: 0.5}}}}, nil
}

// fakeResponder answers "question|chunk ids". Chunk "c-down" fails as an
// unavailable server; "c-missing" as a missing model.
type fakeResponder struct {
	calls atomic.Int64
}

func (f *fakeResponder) Name() string { return "fake" }

func (f *fakeResponder) Respond(ctx context.Context, q string, chunks []retrieval.Ranked) (string, error) {
	f.calls.Add(1)
	var ids []string
	for _, c := range chunks {
		switch c.ID {
		case "c-down":
			return "", &CallError{Kind: KindUnavailable, Host: "h", Status: 503, Attempts: 3, Err: errors.New("busy")}
		case "c-missing":
			return "", &ModelNotFoundError{Model: "m", Host: "h", Hint: "ollama pull m"}
		}
		ids = append(ids, c.ID)
	}
	return q + "|" + strings.Join(ids, ","), nil
}

// fakeScorer rewards the answer length and counts its calls; rank is its
// reward.rank weight.
type fakeScorer struct {
	mu    sync.Mutex
	calls int
	rank  float64
}

func (f *fakeScorer) WithRetrieval(s hser.Score, ranking []string, qrels map[string]int) hser.Score {
	first := hser.FirstRelevantRank(ranking, qrels)
	s.Judged, s.FirstRelevant, s.RankReward, s.Gamma = true, first, hser.RankReward(first), f.rank
	s.Reward += f.rank * s.RankReward
	return s
}

func (f *fakeScorer) Config() hser.Config { return hser.Config{Weights: hser.Weights{Rank: f.rank}} }

func (f *fakeScorer) ScoreMulti(pred string, _ []string, ctx []string) hser.Score {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	hit := 0.0
	if len(ctx) > 0 {
		hit = 1
	}
	return hser.Score{RougeF1: 0.5, Hit: hit, Alpha: 1, Beta: 1, Reward: float64(len(pred)) + hit}
}

func group(id, question string, rewrites ...string) Group {
	g := Group{PromptID: id, Turn: datasets.Turn{ConvID: "conv-" + id, Turn: 2, Question: question, Answer: "ref", User: "u-" + id}}
	for i, r := range rewrites {
		g.Samples = append(g.Samples, Sample{Index: i, Rewrite: r, PolicyVersion: 7})
	}
	return g
}

func newTestRunner(t *testing.T, cfg Config, ret retrieval.Retriever, resp Responder, sc Scorer) *Runner {
	t.Helper()
	r, err := NewRunner(cfg, ret, resp, sc)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRunOrderAndContent(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Concurrency = 3
	ret, resp, sc := &fakeRetriever{}, &fakeResponder{}, &fakeScorer{}
	r := newTestRunner(t, cfg, ret, resp, sc)
	var groups []Group
	for g := range 4 {
		var rws []string
		for s := range 5 {
			rws = append(rws, fmt.Sprintf("w%d%d tail", g, s))
		}
		groups = append(groups, group(fmt.Sprint(g), fmt.Sprintf("question %d", g), rws...))
	}
	recs, st, err := r.Run(t.Context(), 3, groups)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 20 || st.Rollouts != 20 {
		t.Fatalf("got %d records, stats %+v", len(recs), st)
	}
	for i, rec := range recs {
		g, s := i/5, i%5
		wantAnswer := fmt.Sprintf("question %d|c-w%d%d", g, g, s)
		if rec.GroupIndex != g || rec.SampleIndex != s || rec.Step != 3 || rec.PolicyVersion != 7 ||
			rec.PromptID != fmt.Sprint(g) || rec.ConvID != "conv-"+fmt.Sprint(g) || rec.Turn != 2 {
			t.Errorf("record %d identity = %+v", i, rec)
		}
		if rec.Answer != wantAnswer {
			t.Errorf("record %d answer %q, want %q", i, rec.Answer, wantAnswer)
		}
		if rec.Reward != float64(len(wantAnswer))+1 || rec.Hit != 1 || rec.RougeF1 != 0.5 || rec.Alpha != 1 {
			t.Errorf("record %d reward terms %+v", i, rec)
		}
		if len(rec.ChunkIDs) != 1 || rec.ChunkIDs[0] != fmt.Sprintf("c-w%d%d", g, s) || rec.ChunkScores[0] != 3 {
			t.Errorf("record %d chunks %v %v", i, rec.ChunkIDs, rec.ChunkScores)
		}
		if len(rec.Memories) != 1 || rec.Memories[0] != "earlier u-"+fmt.Sprint(g) || rec.MemorySims[0] != 0.5 {
			t.Errorf("record %d memories %v %v", i, rec.Memories, rec.MemorySims)
		}
		if rec.Error != "" || rec.Dedup || rec.CacheHit {
			t.Errorf("record %d flags %+v", i, rec)
		}
	}
	if st.ResponderCalls != 20 || st.DedupHits != 0 || st.CacheHits != 0 || st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}
	if p := ret.peak.Load(); p > 3 {
		t.Errorf("peak concurrency %d exceeds the limit 3", p)
	}
}

func TestRunConcurrencyIsBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Concurrency = 4
	gate := make(chan struct{})
	ret := &fakeRetriever{gate: gate}
	r := newTestRunner(t, cfg, ret, &fakeResponder{}, &fakeScorer{})
	var rws []string
	for i := range 32 {
		rws = append(rws, fmt.Sprintf("r%d", i))
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := r.Run(t.Context(), 0, []Group{group("g", "q", rws...)})
		done <- err
	}()
	// Release calls one at a time; in-flight never exceeds the limit and the
	// limit is actually reached (the runner does not serialize).
	for i := range 32 {
		for ret.inflight.Load() != int64(min(4, 32-i)) {
			runtime.Gosched()
		}
		gate <- struct{}{}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p := ret.peak.Load(); p != 4 {
		t.Errorf("peak in-flight retrievals = %d, want exactly the limit 4", p)
	}
}

func TestRunDedup(t *testing.T) {
	ret, resp, sc := &fakeRetriever{}, &fakeResponder{}, &fakeScorer{}
	r := newTestRunner(t, DefaultConfig(), ret, resp, sc)
	groups := []Group{
		// "A b", "a  B" and " a b " normalize alike; "c" differs.
		group("1", "q1", "A b", "a  B", "c", " a b "),
		// Same rewrite, different question: a different rollout.
		group("2", "q2", "a b"),
	}
	recs, st, err := r.Run(t.Context(), 0, groups)
	if err != nil {
		t.Fatal(err)
	}
	if got := ret.calls.Load(); got != 3 {
		t.Errorf("retrieval calls = %d, want 3", got)
	}
	if st.DedupHits != 2 || st.ResponderCalls != 3 {
		t.Errorf("stats %+v, want 2 dedup hits and 3 responder calls", st)
	}
	wantDedup := []bool{false, true, false, true, false}
	for i, rec := range recs {
		if rec.Dedup != wantDedup[i] {
			t.Errorf("record %d dedup = %v, want %v", i, rec.Dedup, wantDedup[i])
		}
	}
	// A deduplicated sample keeps its own rewrite and identity, and is scored.
	if recs[1].Rewrite != "a  B" || recs[1].SampleIndex != 1 || recs[1].Answer != "q1|c-a" || sc.calls != 5 {
		t.Errorf("dedup record %+v, scorer calls %d", recs[1], sc.calls)
	}

	cfg := DefaultConfig()
	cfg.Dedup = false
	ret2 := &fakeRetriever{}
	r2 := newTestRunner(t, cfg, ret2, &fakeResponder{}, &fakeScorer{})
	_, st2, err := r2.Run(t.Context(), 0, groups)
	if err != nil {
		t.Fatal(err)
	}
	if ret2.calls.Load() != 5 || st2.DedupHits != 0 {
		t.Errorf("dedup off: %d retrievals, stats %+v", ret2.calls.Load(), st2)
	}
}

func TestRunAnswerCache(t *testing.T) {
	resp := &fakeResponder{}
	r := newTestRunner(t, DefaultConfig(), &fakeRetriever{}, resp, &fakeScorer{})
	// "x one" and "x two" retrieve the same chunk: same prompt, one call.
	g := []Group{group("1", "q", "x one", "x two", "y")}
	recs, st, err := r.Run(t.Context(), 0, g)
	if err != nil {
		t.Fatal(err)
	}
	if st.ResponderCalls != 2 || st.CacheHits != 1 || resp.calls.Load() != 2 {
		t.Errorf("step 0 stats %+v, responder calls %d", st, resp.calls.Load())
	}
	if recs[0].CacheHit == recs[1].CacheHit || recs[2].CacheHit {
		t.Errorf("exactly one of the two same-prompt samples is a cache hit: %v %v %v", recs[0].CacheHit, recs[1].CacheHit, recs[2].CacheHit)
	}
	// The next step asks nothing new.
	recs2, st2, err := r.Run(t.Context(), 1, g)
	if err != nil {
		t.Fatal(err)
	}
	if st2.ResponderCalls != 0 || st2.CacheHits != 3 || resp.calls.Load() != 2 {
		t.Errorf("step 1 stats %+v", st2)
	}
	for i := range recs2 {
		if recs2[i].Answer != recs[i].Answer || !recs2[i].CacheHit {
			t.Errorf("record %d: cached answer %q vs %q", i, recs2[i].Answer, recs[i].Answer)
		}
	}
}

func TestAnswerCacheBoundedAndOnDisk(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.CacheSize = 2
	cfg.CacheDir = dir
	resp := &fakeResponder{}
	r := newTestRunner(t, cfg, &fakeRetriever{}, resp, &fakeScorer{})
	g := []Group{group("1", "q", "a", "b", "c", "d")}
	if _, _, err := r.Run(t.Context(), 0, g); err != nil {
		t.Fatal(err)
	}
	if n := r.CacheLen(); n != 2 {
		t.Errorf("in-memory cache holds %d entries, want the bound 2", n)
	}
	// A fresh runner on the same directory answers everything from disk.
	resp2 := &fakeResponder{}
	r2 := newTestRunner(t, cfg, &fakeRetriever{}, resp2, &fakeScorer{})
	recs, st, err := r2.Run(t.Context(), 1, g)
	if err != nil {
		t.Fatal(err)
	}
	if resp2.calls.Load() != 0 || st.CacheHits != 4 {
		t.Errorf("disk cache: %d calls, stats %+v", resp2.calls.Load(), st)
	}
	if recs[3].Answer != "q|c-d" {
		t.Errorf("answer from disk %q", recs[3].Answer)
	}
	// Cache size 0 and no directory: every step calls the responder.
	cfg0 := DefaultConfig()
	cfg0.CacheSize = 0
	resp3 := &fakeResponder{}
	r3 := newTestRunner(t, cfg0, &fakeRetriever{}, resp3, &fakeScorer{})
	for step := range 2 {
		if _, _, err := r3.Run(t.Context(), step, g); err != nil {
			t.Fatal(err)
		}
	}
	if resp3.calls.Load() != 8 {
		t.Errorf("no cache: %d responder calls, want 8", resp3.calls.Load())
	}
}

func TestRunFailuresAreRecordedNotScored(t *testing.T) {
	sc := &fakeScorer{}
	r := newTestRunner(t, DefaultConfig(), &fakeRetriever{}, &fakeResponder{}, sc)
	recs, st, err := r.Run(t.Context(), 0, []Group{group("1", "q", "ok", "FAIL here", "down", "ok2")})
	if err != nil {
		t.Fatal(err)
	}
	if st.Failed != 2 || sc.calls != 2 {
		t.Errorf("stats %+v, scorer calls %d; want 2 failures and 2 scored", st, sc.calls)
	}
	if recs[1].ErrorKind != KindRetrieval || !strings.Contains(recs[1].Error, "index exploded") || recs[1].Reward != 0 {
		t.Errorf("retrieval failure record %+v", recs[1])
	}
	if recs[2].ErrorKind != KindUnavailable || recs[2].Reward != 0 || recs[2].Answer != "" || !recs[2].Failed() {
		t.Errorf("responder failure record %+v", recs[2])
	}
	if recs[0].Failed() || recs[3].Failed() || recs[0].Reward == 0 {
		t.Errorf("successful records %+v %+v", recs[0], recs[3])
	}
}

// More failed rollouts than max_failed_fraction allows stop the run; exactly
// the bound does not (2 of 4 at 0.5 above).
func TestRunTooManyFailed(t *testing.T) {
	sc := &fakeScorer{}
	r := newTestRunner(t, DefaultConfig(), &fakeRetriever{}, &fakeResponder{}, sc)
	recs, st, err := r.Run(t.Context(), 3, []Group{group("1", "q", "ok", "FAIL here", "down", "down too")})
	var tmf *TooManyFailedError
	if !errors.As(err, &tmf) || !errors.Is(err, ErrTooManyFailed) || recs != nil {
		t.Fatalf("3 of 4 failed at bound 0.5: recs %v, err %v; want a TooManyFailedError", recs, err)
	}
	if tmf.Failed != 3 || tmf.Total != 4 || st.Failed != 3 || tmf.Kinds[KindRetrieval] != 1 || tmf.Kinds[KindUnavailable] != 2 {
		t.Errorf("error %+v, stats %+v", tmf, st)
	}
	for _, w := range []string{"3 of 4 rollouts failed", "retrieval 1, unavailable 2", "max_failed_fraction 0.5", "index exploded"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	// Bound 1 never stops; bound 0 stops at the first failure.
	cfg := DefaultConfig()
	cfg.MaxFailedFraction = 1
	all := []Group{group("1", "q", "FAIL a", "FAIL b")}
	if _, st, err := newTestRunner(t, cfg, &fakeRetriever{}, &fakeResponder{}, sc).Run(t.Context(), 0, all); err != nil || st.Failed != 2 {
		t.Errorf("bound 1: %+v, %v", st, err)
	}
	cfg.MaxFailedFraction = 0
	one := []Group{group("1", "q", "ok", "ok2", "ok3", "FAIL")}
	if _, _, err := newTestRunner(t, cfg, &fakeRetriever{}, &fakeResponder{}, sc).Run(t.Context(), 0, one); !errors.Is(err, ErrTooManyFailed) {
		t.Errorf("bound 0, one failure: %v", err)
	}
}

func TestRunFatalErrors(t *testing.T) {
	r := newTestRunner(t, DefaultConfig(), &fakeRetriever{}, &fakeResponder{}, &fakeScorer{})
	_, _, err := r.Run(t.Context(), 0, []Group{group("1", "q", "ok", "missing")})
	var nf *ModelNotFoundError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "run `ollama pull m`") {
		t.Errorf("missing model: err = %v, want a ModelNotFoundError", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	ret := &fakeRetriever{gate: make(chan struct{})}
	r2 := newTestRunner(t, DefaultConfig(), ret, &fakeResponder{}, &fakeScorer{})
	done := make(chan error, 1)
	go func() {
		_, _, err := r2.Run(ctx, 0, []Group{group("1", "q", "a", "b", "c")})
		done <- err
	}()
	for ret.inflight.Load() < 3 { // wait until all three are blocked in the retriever
		runtime.Gosched()
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled run: err = %v, want context.Canceled", err)
	}
}

func TestNewRunnerRejectsNil(t *testing.T) {
	var nilScorer *hser.Scorer
	if _, err := NewRunner(DefaultConfig(), &fakeRetriever{}, &fakeResponder{}, nilScorer); err == nil {
		t.Error("nil *hser.Scorer accepted")
	}
	if _, err := NewRunner(DefaultConfig(), nil, &fakeResponder{}, &fakeScorer{}); err == nil {
		t.Error("nil retriever accepted")
	}
	cfg := DefaultConfig()
	cfg.Concurrency = 0
	if _, err := NewRunner(cfg, &fakeRetriever{}, &fakeResponder{}, &fakeScorer{}); err == nil {
		t.Error("concurrency 0 accepted")
	}
}

func TestNormalizeRewrite(t *testing.T) {
	for in, want := range map[string]string{"  Hello\tWORLD \n": "hello world", "": "", "a  b": "a b"} {
		if got := NormalizeRewrite(in); got != want {
			t.Errorf("NormalizeRewrite(%q) = %q, want %q", in, got, want)
		}
	}
}

// The ASCII fast path equals the definition (lowercase, strings.Fields,
// joined by one space) on random text over letters, digits, every ASCII
// space and a few non-ASCII runes, and returns an already normal string as is.
func TestNormalizeRewriteMatchesDefinition(t *testing.T) {
	alphabet := []string{"a", "Z", "q", "7", " ", " ", "\t", "\n", "\v", "\f", "\r", "\x00", ".", "É", "\u0085", "\u00a0", "ß"}
	r := rand.New(rand.NewPCG(3, 4))
	fast := 0
	for range 50000 {
		var b strings.Builder
		for range r.IntN(12) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		in := b.String()
		want := strings.Join(strings.Fields(strings.ToLower(in)), " ")
		if got := NormalizeRewrite(in); got != want {
			t.Fatalf("NormalizeRewrite(%q) = %q, want %q", in, got, want)
		}
		if _, ok := normalizeRewriteASCII(in); ok {
			fast++
		}
	}
	if fast < 5000 {
		t.Fatalf("only %d inputs took the ASCII path", fast)
	}
	if s := "already normal 42"; NormalizeRewrite(s) != s || testing.AllocsPerRun(10, func() { NormalizeRewrite(s) }) != 0 {
		t.Error("a normal rewrite is copied")
	}
}

// samplingResponder is a fakeResponder at temperature > 0.
type samplingResponder struct{ fakeResponder }

func (*samplingResponder) Deterministic() bool { return false }

func TestSamplingResponderIsNeverCached(t *testing.T) {
	resp := &samplingResponder{}
	r := newTestRunner(t, DefaultConfig(), &fakeRetriever{}, resp, &fakeScorer{})
	// "x one" and "x two" render the same prompt; "x one" twice is one dedup job.
	g := []Group{group("1", "q", "x one", "x two", "x one")}
	for step := range 2 {
		_, st, err := r.Run(t.Context(), step, g)
		if err != nil {
			t.Fatal(err)
		}
		if st.CacheHits != 0 || st.ResponderCalls != 2 || st.DedupHits != 1 {
			t.Errorf("step %d stats %+v: want 2 calls, no cache hits, 1 dedup", step, st)
		}
	}
	if resp.calls.Load() != 4 {
		t.Errorf("responder calls %d, want 4", resp.calls.Load())
	}
}

// orderedResponder answers the chunks named in last first: each waits until
// the one after it in the list has answered, so the jobs finish in the
// reverse of their order whatever the scheduler does.
type orderedResponder struct {
	fakeResponder
	order []string
	done  map[string]chan struct{}
}

func newOrderedResponder(order ...string) *orderedResponder {
	o := &orderedResponder{order: order, done: map[string]chan struct{}{}}
	for _, id := range order {
		o.done[id] = make(chan struct{})
	}
	return o
}

func (o *orderedResponder) Respond(ctx context.Context, q string, chunks []retrieval.Ranked) (string, error) {
	id := chunks[0].ID
	if i := slices.Index(o.order, id); i >= 0 {
		if i+1 < len(o.order) {
			select {
			case <-o.done[o.order[i+1]]:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		defer close(o.done[id])
	}
	return o.fakeResponder.Respond(ctx, q, chunks)
}

// A bounded cache keeps the answers of a step's last jobs, in job order,
// however the jobs finished: which later samples hit must not depend on
// goroutine timing (metrics.jsonl's cache_hits once differed by one between
// identical runs).
func TestAnswerCacheEvictsInJobOrder(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CacheSize = 2
	cfg.Concurrency = 3
	// Jobs a, b, c finish c, b, a. By job order the LRU keeps b and c (c
	// most recent); by completion order it would keep b and a.
	r := newTestRunner(t, cfg, &fakeRetriever{}, newOrderedResponder("c-a", "c-b", "c-c"), &fakeScorer{})
	g := []Group{group("1", "q", "a", "b", "c")}
	if _, st, err := r.Run(t.Context(), 0, g); err != nil || st.ResponderCalls != 3 {
		t.Fatalf("step 0: %+v, %v", st, err)
	}
	resp := &fakeResponder{}
	r.resp = resp
	recs, st, err := r.Run(t.Context(), 1, g)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{false, true, true} // a was evicted
	for i, rec := range recs {
		if rec.CacheHit != want[i] {
			t.Errorf("step 1 sample %q: cache hit %v, want %v", rec.Rewrite, rec.CacheHit, want[i])
		}
	}
	if st.CacheHits != 2 || st.ResponderCalls != 1 {
		t.Errorf("step 1 stats %+v, want 2 hits and 1 call", st)
	}
}

// Within a step the LRU does not change: a hit in the middle of the step
// does not evict an answer that a later job of the same step needs.
func TestAnswerCacheStepSeesTheCacheAsItBegan(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CacheSize = 2
	cfg.Concurrency = 1
	resp := &fakeResponder{}
	r := newTestRunner(t, cfg, &fakeRetriever{}, resp, &fakeScorer{})
	if _, _, err := r.Run(t.Context(), 0, []Group{group("1", "q", "a", "b")}); err != nil {
		t.Fatal(err)
	}
	// New answers x, y come before a and b in this step; with puts applied
	// at once, x and y would evict a and b before their lookups.
	recs, st, err := r.Run(t.Context(), 1, []Group{group("1", "q", "x", "y", "a", "b")})
	if err != nil {
		t.Fatal(err)
	}
	if st.CacheHits != 2 || st.ResponderCalls != 2 || !recs[2].CacheHit || !recs[3].CacheHit {
		t.Errorf("stats %+v, hits %v %v; want a and b from the cache", st, recs[2].CacheHit, recs[3].CacheHit)
	}
	if n := r.CacheLen(); n != 2 {
		t.Errorf("cache holds %d, want the bound 2", n)
	}
}
