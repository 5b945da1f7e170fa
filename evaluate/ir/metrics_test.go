package ir

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/retrieval"
)

func TestIRVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(sharedtest.SharedDir(t), "metrics", "ir_vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Qrels    string                        `json:"qrels"`
		Run      string                        `json:"run"`
		PerQuery map[string]map[string]float64 `json:"per_query"`
		Mean     map[string]float64            `json:"mean_over_run_queries_in_qrels (pytrec_eval-style / trec_eval default)"`
		MeanC    map[string]float64            `json:"mean_with_-c (qrels queries missing from run count as 0)"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	run, err := ParseTRECRun(strings.NewReader(v.Run), "run")
	if err != nil {
		t.Fatal(err)
	}
	qrels, err := ParseQrels(strings.NewReader(v.Qrels), "qrels")
	if err != nil {
		t.Fatal(err)
	}
	metrics := map[string]func([]retrieval.Scored, map[string]int) float64{
		"recip_rank": RecipRank,
		"ndcg_cut_3": func(r []retrieval.Scored, q map[string]int) float64 { return NDCGCut(r, q, 3) },
		"recall_10":  func(r []retrieval.Scored, q map[string]int) float64 { return Recall(r, q, 10) },
		"recall_100": func(r []retrieval.Scored, q map[string]int) float64 { return Recall(r, q, 100) },
	}
	sums := map[string]float64{}
	n := 0
	var qids []string
	for q := range run {
		qids = append(qids, q)
	}
	sort.Strings(qids)
	for _, q := range qids {
		qr, judged := qrels[q]
		if !judged {
			continue // trec_eval skips run queries without judgments (q8)
		}
		n++
		want, ok := v.PerQuery[q]
		if !ok {
			t.Fatalf("query %s evaluated but has no reference values", q)
		}
		for name, m := range metrics {
			got := m(run[q], qr)
			if math.Abs(got-want[name]) > 1e-12 {
				t.Errorf("%s %s = %v, want %v", q, name, got, want[name])
			}
			sums[name] += got
		}
	}
	if n != len(v.PerQuery) {
		t.Errorf("evaluated %d queries, reference has %d", n, len(v.PerQuery))
	}
	for name := range metrics {
		if got := sums[name] / float64(n); math.Abs(got-v.Mean[name]) > 1e-12 {
			t.Errorf("mean %s = %v, want %v", name, got, v.Mean[name])
		}
		// -c: every judged query counts, missing ones as 0.
		if got := sums[name] / float64(len(qrels)); math.Abs(got-v.MeanC[name]) > 1e-12 {
			t.Errorf("mean -c %s = %v, want %v", name, got, v.MeanC[name])
		}
	}
}

func TestWriteTRECRunRoundTrip(t *testing.T) {
	var b strings.Builder
	run := []retrieval.Scored{{ID: "b", Score: 1}, {ID: "a", Score: 2}, {ID: "c", Score: 1}}
	if err := WriteTRECRun(&b, "q1", run, "himes"); err != nil {
		t.Fatal(err)
	}
	want := "q1 Q0 a 1 2 himes\nq1 Q0 c 2 1 himes\nq1 Q0 b 3 1 himes\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	if err := WriteTRECRun(&b, "q 1", run, "x"); err == nil {
		t.Fatal("qid with a space accepted")
	}
}
