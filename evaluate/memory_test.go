package evaluate

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/memory"
	"github.com/himes-rl/himes/retrieval"
)

func TestMemoryActivationHandComputed(t *testing.T) {
	for _, c := range []struct {
		act, rel []string
		p, r, rr float64
	}{
		{[]string{"a", "b", "c"}, []string{"c", "x"}, 1.0 / 3, 0.5, 1.0 / 3},
		{[]string{"c", "x"}, []string{"c", "x"}, 1, 1, 1},
		{nil, []string{"c"}, 0, 0, 0},
		{[]string{"a", "b"}, []string{"c"}, 0, 0, 0},
	} {
		p, r, rr := MemoryActivation(c.act, c.rel)
		if math.Abs(p-c.p) > 1e-12 || math.Abs(r-c.r) > 1e-12 || math.Abs(rr-c.rr) > 1e-12 {
			t.Errorf("%v vs %v: got %v %v %v, want %v %v %v", c.act, c.rel, p, r, rr, c.p, c.r, c.rr)
		}
	}
	if p, _, _ := MemoryActivation([]string{"a"}, nil); !math.IsNaN(p) {
		t.Error("no labels must be NaN (not a labelled turn)")
	}
}

// memRetriever activates fixed memory ids per query, and re-ranks with them
// for the queries in rerank.
type memRetriever struct {
	act    map[string][]string
	rerank map[string]bool
}

func (m memRetriever) Retrieve(_ context.Context, _, _, query string) (retrieval.Result, error) {
	var res retrieval.Result
	res.Chunks = []retrieval.Ranked{{Chunk: retrieval.Chunk{ID: "p#0", PassageID: "p", Text: "text"}, Score: 1}}
	res.Trace.Candidates = []retrieval.Scored{{ID: "p#0", Score: 1}}
	for _, id := range m.act[query] {
		res.Trace.Memories = append(res.Trace.Memories, memory.Activated{ID: id, Text: "memory " + id})
	}
	res.Trace.Reranked = m.rerank[query]
	return res, nil
}

// Memory metrics are means over the labelled turns of memory-on systems
// only, in the report's metrics under their names and in summary.md.
func TestEvaluateReportsMemoryActivation(t *testing.T) {
	turns := []datasets.Turn{
		{ConvID: "a", Turn: 1, Question: "q1", User: "a", MemoryLabels: []string{"1", "2"}},
		{ConvID: "a", Turn: 2, Question: "q2", User: "a"}, // unlabelled: left out
		{ConvID: "b", Turn: 1, Question: "q3", User: "b", MemoryLabels: []string{"5"}},
	}
	ret := memRetriever{act: map[string][]string{"q1": {"2", "9"}, "q2": {"1"}, "q3": {"7", "8", "5"}}, rerank: map[string]bool{"q3": true}}
	scorer, _ := hser.NewScorer(hser.DefaultConfig())
	systems := []System{
		{Name: "raw", Rewriter: Raw{}, Retriever: ret},
		{Name: "raw+memory", Rewriter: Raw{}, Memory: true, Retriever: ret},
	}
	rep, _, err := Evaluate(context.Background(), turns, systems, firstChunk{}, scorer,
		Options{Stats: stats.Config{Resamples: 200, Level: 0.95, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rep.Systems[0].Metrics[MMemRecall]; ok {
		t.Error("memory-off system reports memory metrics")
	}
	// Activated on all three turns, re-ranked on q3's alone (the trace's word).
	if s := rep.Systems[1]; s.MemoryTurns != 3 || s.RerankedTurns != 1 {
		t.Errorf("memory_turns %d, reranked_turns %d; want 3 and 1", s.MemoryTurns, s.RerankedTurns)
	}
	m := rep.Systems[1].Metrics
	// q1: P 1/2, R 1/2, RR 1; q3: P 1/3, R 1, RR 1/3
	for name, want := range map[string]float64{MMemPrecision: (0.5 + 1.0/3) / 2, MMemRecall: 0.75, MMemMRR: (1 + 1.0/3) / 2} {
		if e, ok := m[name]; !ok || math.Abs(e.Mean-want) > 1e-12 || e.Turns != 2 {
			t.Errorf("%s: %+v, want mean %v over 2 turns", name, e, want)
		}
	}
	var md strings.Builder
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "mem R") || !strings.Contains(md.String(), "0.750") {
		t.Errorf("summary.md lacks the memory recall:\n%s", md.String())
	}
	var js strings.Builder
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"memory_precision"`, `"memory_recall"`, `"memory_mrr"`} {
		if !strings.Contains(js.String(), k) {
			t.Errorf("summary.json lacks %s", k)
		}
	}
}
