package retrieval

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/memory"
)

// The causal view over two users' conversations: at every question a user
// sees their facts and only the questions they asked before it; a user's
// first question sees no question at all.
func TestCausalRetrieverNeverSeesOwnOrLaterQuestions(t *testing.T) {
	kb := writeFile(t, "kb.jsonl", tinyKB)
	cfg := DefaultConfig()
	cfg.Memory.Enabled, cfg.Memory.TopN, cfg.Memory.MinPartition = true, 50, 1000
	p, err := Open(t.Context(), cfg, kb)
	if err != nil {
		t.Fatal(err)
	}
	questions := map[string][]string{
		"ann": {"garage door opener noise", "garage door springs", "which lubrication for the door", "red wine with fish"},
		"bob": {"red wine", "white wine with fish", "garage door opener battery"},
	}
	var entries []memory.Entry
	for _, u := range []string{"ann", "bob"} {
		entries = append(entries, memory.Entry{User: u, ID: "f1", Text: u + " owns a garage door"})
		for i, q := range questions[u] {
			entries = append(entries, memory.Entry{User: u, ID: fmt.Sprintf("q%d", i+1), Text: q, Seq: int64(i + 1)})
		}
	}
	causal, err := AttachMemory(t.Context(), cfg.Memory, p, entries)
	if err != nil {
		t.Fatal(err)
	}
	for u, qs := range questions {
		for k, q := range qs {
			res, err := causal.Retrieve(t.Context(), u, q, q)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range res.Trace.Memories {
				got = append(got, m.ID)
			}
			slices.Sort(got)
			want := []string{"f1"}
			for j := range k {
				want = append(want, fmt.Sprintf("q%d", j+1))
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s question %d: activated %v, want %v", u, k+1, got, want)
			}
		}
	}
	// an unknown query sees all of the user's memories
	res, _ := causal.Retrieve(t.Context(), "bob", "door", "something new about doors")
	if len(res.Trace.Memories) != 4 {
		t.Errorf("ad-hoc query: %d memories, want all 4", len(res.Trace.Memories))
	}
	// a memory already loaded with another text is a conflict
	p.memBase = []memory.Entry{{User: "ann", ID: "f1", Text: "ann rents"}}
	if _, err := AttachMemory(t.Context(), cfg.Memory, p, entries); err == nil || !strings.Contains(err.Error(), `"f1"`) {
		t.Errorf("conflicting memory: %v", err)
	}
}

// The floor: memories less similar to the query than rerank_floor leave the
// retrieval order; above it the re-rank fuses (1−w)·mean cosine + w·the
// min–max normalized retrieval score, recomputed here independently.
func TestRerankFloorAndFusion(t *testing.T) {
	kb := writeFile(t, "kb.jsonl", tinyKB)
	cfg := DefaultConfig()
	cfg.Memory.Enabled, cfg.Memory.TopN, cfg.Memory.RetrievalWeight = true, 2, 0.5
	p, err := Open(t.Context(), cfg, kb)
	if err != nil {
		t.Fatal(err)
	}
	entries := []memory.Entry{
		{User: "u", ID: "a", Text: "garage door springs lubrication"},
		{User: "u", ID: "b", Text: "sliding doors need lubrication"},
	}
	if _, err := AttachMemory(t.Context(), cfg.Memory, p, entries); err != nil {
		t.Fatal(err)
	}
	query := "garage door problems"
	res, err := p.Retrieve(t.Context(), "u", "garage door opener", query)
	if err != nil {
		t.Fatal(err)
	}
	best := 0.0
	for _, m := range res.Trace.Memories {
		best = max(best, m.Sim)
	}
	if best <= 0 || !res.Trace.Reranked {
		t.Fatalf("best memory cosine %v, reranked %v: the test needs similar memories", best, res.Trace.Reranked)
	}
	emb, _ := p.Embedder()
	checkFusedByHand(t, p, res, emb, 0.5)
	// a floor just above the best cosine: retrieval order, scores untouched
	cfg.Memory.RerankFloor = best + 1e-9
	p2, _ := Open(t.Context(), cfg, kb)
	if _, err := AttachMemory(t.Context(), cfg.Memory, p2, entries); err != nil {
		t.Fatal(err)
	}
	res2, _ := p2.Retrieve(t.Context(), "u", "garage door opener", query)
	if res2.Trace.Reranked || len(res2.Trace.Memories) == 0 {
		t.Fatalf("below the floor: reranked %v with %d memories", res2.Trace.Reranked, len(res2.Trace.Memories))
	}
	for i, c := range res2.Chunks {
		if c.ID != res2.Trace.Candidates[i].ID || c.Score != res2.Trace.Candidates[i].Score {
			t.Fatalf("below the floor, rank %d: %s %v, retrieval gave %+v", i+1, c.ID, c.Score, res2.Trace.Candidates[i])
		}
	}
}

// checkFusedByHand recomputes res's fused re-rank with emb and weight w —
// (1−w)·the mean cosine of a candidate with the activated memories +
// w·its min–max normalized retrieval score — and compares it with
// res.Chunks, ids and scores.
func checkFusedByHand(t *testing.T, p *Pipeline, res Result, emb embedding.Embedder, w float64) {
	t.Helper()
	embed := func(text string) []float32 {
		v, err := emb.Embed(t.Context(), []string{text})
		if err != nil {
			t.Fatal(err)
		}
		return v[0]
	}
	var memVecs [][]float32
	for _, m := range res.Trace.Memories {
		memVecs = append(memVecs, embed(m.Text))
	}
	if len(memVecs) == 0 || !res.Trace.Reranked {
		t.Fatalf("%d memories, reranked %v: the check needs a re-rank", len(memVecs), res.Trace.Reranked)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range res.Trace.Candidates {
		lo, hi = min(lo, c.Score), max(hi, c.Score)
	}
	type scored struct {
		id string
		s  float64
	}
	var want []scored
	for _, c := range res.Trace.Candidates {
		ch, _ := p.Chunk(c.ID)
		cv := embed(ch.Title + " " + ch.Text)
		mem := 0.0
		for _, h := range memVecs {
			mem += embedding.Cosine(cv, h)
		}
		want = append(want, scored{c.ID, (1-w)*mem/float64(len(memVecs)) + w*(c.Score-lo)/(hi-lo)})
	}
	slices.SortStableFunc(want, func(a, b scored) int { return -cmpFloat(a.s, b.s) })
	for i, c := range res.Chunks {
		if c.ID != want[i].id || math.Abs(c.Score-want[i].s) > 1e-9 {
			t.Fatalf("fused rank %d: got %s %.6f, want %s %.6f", i+1, c.ID, c.Score, want[i].id, want[i].s)
		}
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Open with embedder lsa and a persisted index loads the index's model (the
// same as fitting anew), and refuses an index built without one.
func TestPipelineLSAPersistedWithIndex(t *testing.T) {
	kb := writeFile(t, "kb.jsonl", tinyKB)
	cfg := DefaultConfig()
	cfg.Embedder, cfg.LSADim, cfg.LSAMinDF, cfg.Memory.Enabled = "lsa", 2, 1, true
	fe, pe := fittedAndPersisted(t, &cfg, kb, (*Pipeline).Embedder)
	if pe.Name() != fe.Name() || !strings.HasPrefix(pe.Name(), "lsa-tfidf-v1/2/") {
		t.Fatalf("persisted %s, fitted %s", pe.Name(), fe.Name())
	}
	hashCfg := cfg
	hashCfg.Embedder, hashCfg.Index = "hash", ""
	dir2 := filepath.Join(t.TempDir(), "ix2")
	if _, err := BuildIndexDir(context.Background(), hashCfg, kb, dir2); err != nil {
		t.Fatal(err)
	}
	cfg.Index = dir2
	if _, err := Open(t.Context(), cfg, kb); err == nil || !strings.Contains(err.Error(), "no LSA model") {
		t.Fatalf("index without a model: %v", err)
	}
}

// fittedAndPersisted opens cfg on kb fitted anew, builds its index and
// opens it again on the index (cfg.Index is left set), returning the
// embedder pick gives for each.
func fittedAndPersisted(t *testing.T, cfg *Config, kb string, pick func(*Pipeline) (embedding.Embedder, error)) (fitted, persisted embedding.Embedder) {
	t.Helper()
	open := func() embedding.Embedder {
		p, err := Open(t.Context(), *cfg, kb)
		if err != nil {
			t.Fatal(err)
		}
		e, err := pick(p)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	fitted = open()
	cfg.Index = filepath.Join(t.TempDir(), "ix")
	if _, err := BuildIndexDir(t.Context(), *cfg, kb, cfg.Index); err != nil {
		t.Fatal(err)
	}
	return fitted, open()
}

// Memories for a prompt (ActivateBefore): at every question a user gets
// their fact and only the questions asked before it, never the question
// itself or a later one; n caps them; an unknown query (a turn the view
// cannot place in time) gets the fact alone; and with the same n and
// signals they are exactly the re-rank's H_n.
func TestActivateBeforeIsCausalAndStrict(t *testing.T) {
	kb := writeFile(t, "kb.jsonl", tinyKB)
	cfg := DefaultConfig()
	cfg.Memory.Enabled, cfg.Memory.TopN, cfg.Memory.MinPartition = true, 50, 1000
	p, err := Open(t.Context(), cfg, kb)
	if err != nil {
		t.Fatal(err)
	}
	qs := []string{"garage door opener noise", "garage door springs", "which lubrication for the door", "red wine with fish"}
	entries := []memory.Entry{{User: "ann", ID: "f1", Text: "ann owns a garage door"}}
	for i, q := range qs {
		entries = append(entries, memory.Entry{User: "ann", ID: fmt.Sprintf("q%d", i+1), Text: q, Seq: int64(i + 1)})
	}
	causal, err := AttachMemory(t.Context(), cfg.Memory, p, entries)
	if err != nil {
		t.Fatal(err)
	}
	sig := memory.Signals{Semantic: 1}
	for k, q := range qs {
		mems, err := causal.ActivateBefore(t.Context(), "ann", q, sig, 50)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range mems {
			got = append(got, m.ID)
		}
		slices.Sort(got)
		want := []string{"f1"}
		for j := range k {
			want = append(want, fmt.Sprintf("q%d", j+1))
		}
		if !slices.Equal(got, want) {
			t.Errorf("question %d: prompt memories %v, want %v", k+1, got, want)
		}
		res, err := causal.Retrieve(t.Context(), "ann", q, q)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(mems, res.Trace.Memories) {
			t.Errorf("question %d: prompt memories %v differ from the re-rank's %v", k+1, mems, res.Trace.Memories)
		}
		if two, _ := causal.ActivateBefore(t.Context(), "ann", q, sig, 2); len(two) != min(2, k+1) || (len(two) > 0 && two[0] != mems[0]) {
			t.Errorf("question %d: n=2 gave %v, want the first %d of %v", k+1, two, min(2, k+1), mems)
		}
	}
	mems, err := causal.ActivateBefore(t.Context(), "ann", "a question nobody asked", sig, 50)
	if err != nil || len(mems) != 1 || mems[0].ID != "f1" {
		t.Errorf("unknown query: %v, %v; want the fact f1 alone", mems, err)
	}
	if mems, err := causal.ActivateBefore(t.Context(), "zoe", qs[0], sig, 50); err != nil || len(mems) != 0 {
		t.Errorf("user without memories: %v, %v", mems, err)
	}
}

// sharedUsers counts the loaded store's users and those the data also has:
// none shared is what AttachMemory warns about.
func TestSharedUsers(t *testing.T) {
	loaded := []memory.Entry{{User: "ann", ID: "a"}, {User: "ann", ID: "b"}, {User: "cy", ID: "c"}}
	for _, c := range []struct {
		data          []memory.Entry
		users, shared int
	}{
		{[]memory.Entry{{User: "bob"}}, 2, 0},
		{[]memory.Entry{{User: "bob"}, {User: "ann"}, {User: "ann"}}, 2, 1},
		{nil, 2, 0},
	} {
		if u, s := sharedUsers(loaded, c.data); u != c.users || s != c.shared {
			t.Errorf("data %v: %d users, %d shared; want %d, %d", c.data, u, s, c.users, c.shared)
		}
	}
	if u, s := sharedUsers(nil, []memory.Entry{{User: "bob"}}); u != 0 || s != 0 {
		t.Errorf("nothing loaded: %d, %d", u, s)
	}
}
