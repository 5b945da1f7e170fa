package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// TestTRECEvalCommand scores the shared trec_eval vectors' files through
// `himes trec-eval`, with a Pyserini-style comment and an extra column, and
// compares every printed value with the vectors (to trec_eval's 4 decimals).
func TestTRECEvalCommand(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(sharedtest.SharedDir(t), "metrics", "ir_vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Qrels    string                        `json:"qrels"`
		Run      string                        `json:"run"`
		PerQuery map[string]map[string]float64 `json:"per_query"`
		MeanC    map[string]float64            `json:"mean_with_-c (qrels queries missing from run count as 0)"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	qrels, run := filepath.Join(dir, "q.qrels"), filepath.Join(dir, "r.run")
	runText := "# pyserini run, with a comment line\n" + strings.ReplaceAll(v.Run, " r\n", " r extra\n")
	if err := os.WriteFile(qrels, []byte(v.Qrels), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(run, []byte(runText), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runScoreCmd(t, "", "trec-eval", "-q", "-c", "-m", "recip_rank", "-m", "ndcg_cut.3", "-m", "recall.10,100", qrels, run)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]float64{"all": v.MeanC, "q7": {"recip_rank": 0, "ndcg_cut_3": 0, "recall_10": 0, "recall_100": 0}}
	for q, m := range v.PerQuery {
		want[q] = m
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			t.Fatalf("line %q: want measure<TAB>qid<TAB>value", line)
		}
		name, qid := strings.TrimSpace(f[0]), f[1]
		if name == "runid" {
			if f[2] != "r" {
				t.Errorf("runid %q, want r", f[2])
			}
			continue
		}
		w, ok := want[qid][name]
		if !ok {
			t.Fatalf("unexpected line %q", line)
		}
		if got := strconv.FormatFloat(w, 'f', 4, 64); f[2] != got {
			t.Errorf("%s %s = %s, want %s", name, qid, f[2], got)
		}
		seen++
	}
	if seen != 4*(len(v.PerQuery)+2) { // the run's judged queries, q7 (-c) and all
		t.Fatalf("%d values printed, want %d:\n%s", seen, 4*(len(v.PerQuery)+2), out)
	}
	// A duplicate doc is refused, naming the file and line.
	if err := os.WriteFile(run, []byte(v.Run+"q1 Q0 d1 9 0.5 r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runScoreCmd(t, "", "trec-eval", qrels, run); err == nil || !strings.Contains(err.Error(), "r.run:23: query q1: docno d1 already on line 1") {
		t.Fatalf("duplicate doc: %v", err)
	}
	if _, _, err := runScoreCmd(t, "", "trec-eval", "-m", "bpref", qrels, run); err == nil {
		t.Fatal("unknown measure accepted")
	}
}
