package evaluate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/himes-rl/himes/evaluate/ir"
	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/internal/stats"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/retrieval"
)

// rankRetriever returns a fixed ranking per query: the final top-k are the
// first k passages as chunks "<id>#0", the candidates all of them.
type rankRetriever struct {
	runs map[string][]string // query → passage ids, best first
	k    int
	mu   sync.Mutex
	seen map[string][]string // user → queries in call order
}

func (f *rankRetriever) Retrieve(_ context.Context, user, rewrite, query string) (retrieval.Result, error) {
	f.mu.Lock()
	if f.seen == nil {
		f.seen = map[string][]string{}
	}
	f.seen[user] = append(f.seen[user], query)
	f.mu.Unlock()
	ids, ok := f.runs[rewrite]
	if !ok {
		return retrieval.Result{}, fmt.Errorf("no run for %q", rewrite)
	}
	var res retrieval.Result
	for i, id := range ids {
		c := retrieval.Chunk{ID: id + "#0", PassageID: id, Text: "text of " + id}
		score := float64(len(ids) - i)
		if i < f.k {
			res.Chunks = append(res.Chunks, retrieval.Ranked{Chunk: c, Score: score})
		}
		res.Trace.Candidates = append(res.Trace.Candidates, retrieval.Scored{ID: c.ID, Score: score})
	}
	return res, nil
}

// firstChunk answers with the first chunk's text.
type firstChunk struct{}

func (firstChunk) Name() string { return "first-chunk" }
func (firstChunk) Respond(_ context.Context, _ string, chunks []retrieval.Ranked) (string, error) {
	if len(chunks) == 0 {
		return "", errors.New("no chunks")
	}
	return chunks[0].Text, nil
}

type irVectors struct {
	Qrels    string                        `json:"qrels"`
	Run      string                        `json:"run"`
	PerQuery map[string]map[string]float64 `json:"per_query"`
	Mean     map[string]float64            `json:"mean_over_run_queries_in_qrels (pytrec_eval-style / trec_eval default)"`
}

// The shared trec_eval vectors, run through Evaluate: each qrels query is a
// turn, the run is what the retriever returns. Per-turn values and the means
// (trec_eval's default: judged queries present in the run, including one
// with only non-relevant judgments) must match trec_eval 10.0.
func TestEvaluateMatchesTrecEvalVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(sharedtest.SharedDir(t), "metrics", "ir_vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v irVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	qrels, err := ir.ParseQrels(strings.NewReader(v.Qrels), "qrels")
	if err != nil {
		t.Fatal(err)
	}
	run, err := ir.ParseTRECRun(strings.NewReader(v.Run), "run")
	if err != nil {
		t.Fatal(err)
	}
	// The fake retriever ranks as trec_eval orders: score desc, docno desc.
	ret := &rankRetriever{runs: map[string][]string{}, k: 3}
	for q, entries := range run {
		e := slices.Clone(entries)
		slices.SortStableFunc(e, func(a, b retrieval.Scored) int {
			if a.Score != b.Score {
				if a.Score > b.Score {
					return -1
				}
				return 1
			}
			return -strings.Compare(a.ID, b.ID)
		})
		for _, s := range e {
			ret.runs[q] = append(ret.runs[q], s.ID)
		}
	}
	var turns []datasets.Turn
	for q, judged := range qrels {
		tn := datasets.Turn{ConvID: "c" + q, Turn: 1, Question: q, Answer: "text of x", User: "u"}
		for id, rel := range judged {
			tn.Passages = append(tn.Passages, datasets.PassageRef{ID: id, Relevance: &rel})
		}
		turns = append(turns, tn)
	}
	slices.SortFunc(turns, func(a, b datasets.Turn) int { return strings.Compare(a.ConvID, b.ConvID) })
	scorer, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rep, results, err := Evaluate(context.Background(), turns, []System{{Name: "raw", Rewriter: Raw{}, Retriever: ret}},
		firstChunk{}, scorer, Options{Concurrency: 3, Stats: stats.Config{Resamples: 100, Level: 0.95, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	sys := rep.Systems[0]
	// q7 is judged but absent from the run: a failed retrieval, counted.
	if sys.Failed != 1 || sys.Failures["retrieve"] != 1 {
		t.Fatalf("failures %+v, want q7's retrieval", sys.Failures)
	}
	for _, r := range results[0] {
		want, ok := v.PerQuery[r.Question]
		if !ok {
			if r.HasGold {
				t.Errorf("%s: has metrics, trec_eval has none", r.Question)
			}
			continue
		}
		got := map[string]float64{MMRR: r.RecipRank, MNDCG3: r.NDCG3, MRecall10: r.Recall10, MRecall100: r.Recall100}
		for m, w := range want {
			if math.Abs(got[m]-w) > 1e-12 {
				t.Errorf("%s %s = %v, trec_eval %v", r.Question, m, got[m], w)
			}
		}
	}
	for m, w := range v.Mean {
		e, ok := sys.Metrics[m]
		if !ok || math.Abs(e.Mean-w) > 1e-12 {
			t.Errorf("mean %s = %+v, trec_eval %v", m, e, w)
		}
	}

	// The TREC run file evaluates, through retrieval's metrics, to the same values.
	var buf bytes.Buffer
	if err := WriteTRECRun(&buf, results[0], "raw"); err != nil {
		t.Fatal(err)
	}
	back, err := ir.ParseTRECRun(&buf, "raw.trec")
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range v.PerQuery {
		got := ir.RecipRank(back[QueryID("c"+q, 1)], qrels[q])
		if math.Abs(got-want["recip_rank"]) > 1e-12 {
			t.Errorf("run file %s: recip_rank %v, want %v", q, got, want["recip_rank"])
		}
	}
}

// failOn fails the rewrite of the listed questions.
type failOn struct {
	Rewriter
	bad map[string]bool
}

func (f failOn) Rewrite(ctx context.Context, t datasets.Turn) (string, error) {
	if f.bad[t.Question] {
		return "", errors.New("boom")
	}
	return f.Rewriter.Rewrite(ctx, t)
}

// better is a rewriter that maps the question to a query the retriever
// ranks the gold passage first for.
type better struct{}

func (better) Name() string { return "better" }
func (better) Rewrite(_ context.Context, t datasets.Turn) (string, error) {
	return "good:" + t.Question, nil
}

func TestEvaluateComparesOverConversationsAndCountsFailures(t *testing.T) {
	ret := &rankRetriever{runs: map[string][]string{}, k: 2}
	var turns []datasets.Turn
	rel := 1
	for c := range 12 {
		for k := 3; k >= 1; k-- { // out of order on purpose
			q := fmt.Sprintf("q%d-%d", c, k)
			gold := "g" + q
			turns = append(turns, datasets.Turn{ConvID: fmt.Sprintf("conv%02d", c), Turn: k, Question: q, User: fmt.Sprintf("u%d", c),
				Answer: "text of " + gold, Passages: []datasets.PassageRef{{ID: gold, Relevance: &rel}}})
			// raw finds the gold passage at rank 3, better at rank 1.
			ret.runs[q] = []string{"x1", "x2", gold, "x3"}
			ret.runs["good:"+q] = []string{gold, "x1", "x2", "x3"}
		}
	}
	scorer, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	// One retriever per system, so each sees only its own calls.
	ret2 := &rankRetriever{runs: ret.runs, k: ret.k}
	systems := []System{
		{Name: "raw", Rewriter: Raw{}, Retriever: ret},
		{Name: "better", Rewriter: failOn{better{}, map[string]bool{"q0-1": true, "q5-2": true}}, Retriever: ret2},
	}
	var calls int
	rep, results, err := Evaluate(context.Background(), turns, systems, firstChunk{}, scorer,
		Options{Concurrency: 4, Stats: stats.Config{Resamples: 500, Level: 0.95, Seed: 3}, Progress: func(done, total int) {
			calls++
			if total != 72 {
				t.Errorf("progress total %d, want 72", total)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 72 {
		t.Fatalf("progress called %d times, want 72", calls)
	}
	// Turns of one user reach the retriever in turn order, whatever the input order.
	for _, r := range []*rankRetriever{ret, ret2} {
		for user, qs := range r.seen {
			for i := 1; i < len(qs); i++ {
				if qs[i] < qs[i-1] { // "qC-K": same C within a user, so K decides
					t.Fatalf("user %s: turns reached the retriever as %v", user, qs)
				}
			}
		}
	}
	raw, b := rep.Systems[0], rep.Systems[1]
	if raw.Metrics[MRecall10].Mean != 1 || math.Abs(raw.Metrics[MMRR].Mean-1.0/3) > 1e-12 {
		t.Fatalf("raw: R@10 %v MRR %v, want 1 and 1/3", raw.Metrics[MRecall10].Mean, raw.Metrics[MMRR].Mean)
	}
	if b.Failed != 2 || b.Failures["rewrite"] != 2 || b.Metrics[MMRR].Turns != 34 {
		t.Fatalf("better: failed %d (%v), MRR over %d turns; want 2 rewrite failures and 34 turns", b.Failed, b.Failures, b.Metrics[MMRR].Turns)
	}
	cmp := b.VsBaseline[MMRR]
	if b.Baseline != "raw" || math.Abs(cmp.Diff-2.0/3) > 1e-12 || cmp.Turns != 34 || cmp.Clusters != 12 || cmp.P > 0.01 {
		t.Fatalf("better vs raw MRR: %+v (baseline %q), want +2/3 over 34 turns in 12 conversations, p < 0.01", cmp, b.Baseline)
	}
	if raw.VsBaseline != nil {
		t.Fatal("the baseline is compared with itself")
	}
	// The answer is the first chunk: the gold passage for better (Rouge-L 1).
	if got := b.Metrics[MRougeF1].Mean; got != 1 {
		t.Fatalf("better Rouge-L F1 %v, want 1", got)
	}
	// Results keep the input order of the turns.
	if results[1][0].Question != turns[0].Question {
		t.Fatal("results not in input order")
	}

	var md bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	// The reward's EM says its normalization; SQuAD's metrics have their own columns.
	if rep.EMNormalization != hser.NormUnicode || b.Metrics[MSquadEM].Turns != 34 {
		t.Fatalf("em normalization %q, SQuAD EM over %d turns; want unicode and 34", rep.EMNormalization, b.Metrics[MSquadEM].Turns)
	}
	for _, want := range []string{"| raw | 0/36 |", "| better | 2/36 |", "| better | vs raw |", "+0.667", "better: 2 of 36 turns failed (rewrite 2)", "Its HSER comparison with raw is over the 34 turns both completed", "R@100 is recall at that depth",
		" EM (reward, unicode norm.) |", " SQuAD EM |", " SQuAD F1 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}

	path := filepath.Join(t.TempDir(), "turns.parquet")
	if err := WriteTurnsParquet(path, results); err != nil {
		t.Fatal(err)
	}
	f, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fr, err := pqarrow.NewFileReader(f, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if tbl.NumRows() != 72 {
		t.Fatalf("%d rows, want 72", tbl.NumRows())
	}
	col := func(name string) arrow.Array {
		idx := tbl.Schema().FieldIndices(name)
		if len(idx) != 1 || len(tbl.Column(idx[0]).Data().Chunks()) != 1 {
			t.Fatalf("column %s missing or chunked", name)
		}
		return tbl.Column(idx[0]).Data().Chunk(0)
	}
	if col("recip_rank").NullN() != 2 || col("error_stage").(*array.String).Value(36+2) != "rewrite" {
		t.Fatalf("the 2 failed turns must have null metrics and their stage")
	}
	// Rows are systems in order, turns in input order: row 0 is raw on turns[0].
	if s := col("system").(*array.String).Value(0); s != "raw" || col("question").(*array.String).Value(0) != turns[0].Question {
		t.Fatalf("row 0 is %s on %s", s, col("question").(*array.String).Value(0))
	}
	if rr := col("recip_rank").(*array.Float64).Value(0); rr != 1.0/3 {
		t.Fatalf("raw recip_rank in the Parquet %v, want 1/3", rr)
	}
	top := col("top_passages").(*array.List)
	if start, end := top.ValueOffsets(0); end-start != 4 {
		t.Fatalf("row 0 keeps %d top passages, want the 4 ranked", end-start)
	}
}

// A turn with several reference answers is scored against the best one, as
// SQuAD does: the answer "text of x1" matches the second reference exactly.
func TestEvaluateScoresEveryReference(t *testing.T) {
	ret := &rankRetriever{runs: map[string][]string{"q": {"x1"}}, k: 1}
	scorer, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	turns := []datasets.Turn{{ConvID: "c", Turn: 1, Question: "q", User: "u", Answer: "something else", Answers: []string{"something else", "text of x1"}}}
	rep, _, err := Evaluate(context.Background(), turns, []System{{Name: "raw", Rewriter: Raw{}, Retriever: ret}}, firstChunk{}, scorer,
		Options{Concurrency: 1, Stats: stats.Config{Resamples: 40, Level: 0.95, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if em := rep.Systems[0].Metrics[MEM].Mean; em != 1 {
		t.Fatalf("EM %v, want 1 (the second reference)", em)
	}
}
