package ir

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/retrieval"
)

type irVectors struct {
	Qrels    string                        `json:"qrels"`
	Run      string                        `json:"run"`
	PerQuery map[string]map[string]float64 `json:"per_query"`
	Mean     map[string]float64            `json:"mean_over_run_queries_in_qrels (pytrec_eval-style / trec_eval default)"`
	MeanC    map[string]float64            `json:"mean_with_-c (qrels queries missing from run count as 0)"`
}

func readIRVectors(t *testing.T) irVectors {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(sharedtest.SharedDir(t), "metrics", "ir_vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v irVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func mustMeasures(t *testing.T, specs ...string) []TRECMeasure {
	t.Helper()
	m, err := ParseTRECMeasures(specs)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestTRECEvalVectors: the shared trec_eval vectors, per query and averaged
// with and without -c, plus map, P_5 and the counts worked out by hand on
// the same files (ranked by score, ties by docno descending):
//
//	q1 d1 at 1: AP 1, P_5 1/5    q2 d5 at 4: AP 1/4, P_5 1/5
//	q3 dB dC dA at 2, 3, 5 of 3 relevant: AP (1/2 + 2/3 + 3/5)/3, P_5 3/5
//	q4, q5 nothing relevant retrieved: 0    q6 z1 at 1: AP 1, P_5 1/5
//	q9 a1 at 3: AP 1/3, P_5 1/5    (q8 has no judgments; q7 is not in the run)
func TestTRECEvalVectors(t *testing.T) {
	v := readIRVectors(t)
	run, err := ReadTRECRun(strings.NewReader(v.Run), "run")
	if err != nil {
		t.Fatal(err)
	}
	qrels, err := ParseQrels(strings.NewReader(v.Qrels), "qrels")
	if err != nil {
		t.Fatal(err)
	}
	ms := mustMeasures(t, "recip_rank", "ndcg_cut.3", "recall.10,100", "map", "P.5", "num_q", "num_ret", "num_rel", "num_rel_ret")
	res := TRECEval(run.Queries, qrels, ms, false)
	if len(res.Queries) != len(v.PerQuery) {
		t.Fatalf("evaluated %d queries, want %d", len(res.Queries), len(v.PerQuery))
	}
	ap := map[string]float64{"q1": 1, "q2": 0.25, "q3": (0.5 + 2.0/3 + 0.6) / 3, "q4": 0, "q5": 0, "q6": 1, "q9": 1.0 / 3}
	p5 := map[string]float64{"q1": 0.2, "q2": 0.2, "q3": 0.6, "q4": 0, "q5": 0, "q6": 0.2, "q9": 0.2}
	for _, q := range res.Queries {
		want := v.PerQuery[q.QID]
		for i, m := range ms {
			var w float64
			switch m.Name {
			case "map":
				w = ap[q.QID]
			case "P":
				w = p5[q.QID]
			case "recip_rank", "ndcg_cut", "recall":
				w = want[m.Label()]
			default:
				continue
			}
			if math.Abs(q.Values[i]-w) > 1e-12 {
				t.Errorf("%s %s = %v, want %v", q.QID, m.Label(), q.Values[i], w)
			}
		}
	}
	meanAP := (1 + 0.25 + (0.5+2.0/3+0.6)/3 + 1 + 1.0/3) / 7
	check := func(what string, res TRECEvalResult, want map[string]float64, ap float64, counts [4]float64) {
		t.Helper()
		for i, m := range ms {
			w, ok := want[m.Label()]
			switch m.Name {
			case "map":
				w, ok = ap, true
			case "num_q", "num_ret", "num_rel", "num_rel_ret":
				w, ok = counts[i-6], true
			}
			if ok && math.Abs(res.All[i]-w) > 1e-12 {
				t.Errorf("%s: all %s = %v, want %v", what, m.Label(), res.All[i], w)
			}
		}
	}
	check("default", res, v.Mean, meanAP, [4]float64{7, 21, 8, 7})
	resC := TRECEval(run.Queries, qrels, ms, true)
	check("-c", resC, v.MeanC, meanAP*7/8, [4]float64{8, 21, 9, 7})
}

// TestTRECFileFormats: trec_eval's comment lines and extra run columns are
// accepted; duplicate docs, short lines and bad numbers are refused with the
// file and line.
func TestTRECFileFormats(t *testing.T) {
	run, err := ReadTRECRun(strings.NewReader("# pyserini run\n  # indented comment\n\nq1 Q0 d1 1 2.5 bm25 extra columns\nq1 Q0 d2 2 1.5 bm25\n"), "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Queries["q1"]) != 2 || run.RunID != "bm25" || run.Queries["q1"][1] != (retrieval.Scored{ID: "d2", Score: 1.5}) {
		t.Fatalf("run %+v", run)
	}
	for _, c := range []struct{ in, want string }{
		{"q1 Q0 d1 1 2 r\nq2 Q0 d1 1 2 r\nq1 Q0 d1 2 1 r\n", "r:3: query q1: docno d1 already on line 1"},
		{"q1 Q0 d1 1 2\n", "r:1: want 6 fields"},
		{"q1 Q0 d1 1 high r\n", "r:1: field score"},
		{"q1 Q0 d1 1 NaN r\n", "r:1: field score"},
	} {
		if _, err := ReadTRECRun(strings.NewReader(c.in), "r"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("run %q: error %v, want %q", c.in, err, c.want)
		}
	}
	q, err := ParseQrels(strings.NewReader("# judged by NIST\nq1 0 d1 2\n\nq1 0 d2 0\n"), "q")
	if err != nil || q["q1"]["d1"] != 2 || len(q["q1"]) != 2 {
		t.Fatalf("qrels %v %v", q, err)
	}
	for _, c := range []struct{ in, want string }{
		{"q1 0 d1 1\nq1 0 d1 0\n", "q:2: query q1: docno d1 already judged on line 1"},
		{"q1 0 d1 1 extra\n", "q:1: want 4 fields"},
		{"q1 0 d1 yes\n", "q:1: field relevance"},
	} {
		if _, err := ParseQrels(strings.NewReader(c.in), "q"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("qrels %q: error %v, want %q", c.in, err, c.want)
		}
	}
}

// TestWriteTRECEval: trec_eval's layout, per query with -q, then runid and
// the means; counts as integers.
func TestWriteTRECEval(t *testing.T) {
	run := map[string][]retrieval.Scored{"b": {{ID: "x", Score: 1}, {ID: "y", Score: 2}}, "a": {{ID: "x", Score: 1}}}
	qrels := map[string]map[string]int{"a": {"x": 1}, "b": {"x": 1}}
	res := TRECEval(run, qrels, mustMeasures(t, "num_q", "recip_rank"), false)
	var buf bytes.Buffer
	if err := WriteTRECEval(&buf, res, true, "tag"); err != nil {
		t.Fatal(err)
	}
	// b ranks y (score 2) above x: recip_rank 1/2; the mean is 0.75.
	want := "recip_rank            \ta\t1.0000\n" +
		"recip_rank            \tb\t0.5000\n" +
		"runid                 \tall\ttag\n" +
		"num_q                 \tall\t2\n" +
		"recip_rank            \tall\t0.7500\n"
	if buf.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", buf.String(), want)
	}
	for _, bad := range []string{"P", "recall.0", "map.3", "bpref"} {
		if _, err := ParseTRECMeasures([]string{bad}); err == nil {
			t.Errorf("measure %q accepted", bad)
		}
	}
}
