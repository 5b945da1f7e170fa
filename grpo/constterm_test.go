package grpo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/rollout"
)

// recN numbers the test records' rewrites: each is a different query.
var recN int

func rec(rouge, em, hit float64) rollout.Record {
	recN++
	return rollout.Record{PromptID: "p", Rewrite: fmt.Sprint("rewrite ", recN), RougeF1: rouge, EM: em, Hit: hit}
}

func TestConstantTerms(t *testing.T) {
	failed := rollout.Record{Error: "responder exploded", ErrorKind: "responder", Hit: 0}
	cases := []struct {
		name string
		recs []rollout.Record
		w    hser.Weights
		want []ConstantTerm
	}{
		{"hit and em constant", []rollout.Record{rec(0.5, 0, 1), rec(0, 0, 1), rec(1, 0, 1)}, hser.Weights{Alpha: 1, Beta: 1},
			[]ConstantTerm{{"em", 0}, {"hit", 1}}},
		{"an unweighted term is not a reward term", []rollout.Record{rec(0.5, 0, 1), rec(0, 0, 1)}, hser.Weights{Alpha: 0, Beta: 1},
			[]ConstantTerm{{"hit", 1}}},
		{"a failed rollout is not scored", []rollout.Record{rec(0.5, 1, 1), failed, rec(0.25, 0, 1)}, hser.Weights{Alpha: 1, Beta: 1},
			[]ConstantTerm{{"hit", 1}}},
		{"everything constant", []rollout.Record{rec(0.5, 0, 0), rec(0.5, 0, 0)}, hser.Weights{Alpha: 1, Beta: 1},
			[]ConstantTerm{{"rougeL_f1", 0.5}, {"em", 0}, {"hit", 0}}},
		{"all vary", []rollout.Record{rec(0.5, 0, 0), rec(0.25, 1, 1)}, hser.Weights{Alpha: 1, Beta: 1}, nil},
		{"one valid rollout says nothing", []rollout.Record{rec(0.5, 0, 1), failed}, hser.Weights{Alpha: 1, Beta: 1}, nil},
		// One turn evaluated with the policy and the raw question, both the
		// question itself: the terms agree whatever the reward.
		{"one query twice says nothing", []rollout.Record{
			{PromptID: "eval/c#1", Rewrite: "why", RougeF1: 0.1, Hit: 1}, {PromptID: "eval/c#1", Rewrite: "why", RougeF1: 0.1, Hit: 1}},
			hser.Weights{Alpha: 1, Beta: 1}, nil},
		{"one turn, two rewrites", []rollout.Record{
			{PromptID: "eval/c#1", Rewrite: "why", RougeF1: 0.1, Hit: 1}, {PromptID: "eval/c#1", Rewrite: "why cats", RougeF1: 0.1, Hit: 1}},
			hser.Weights{Alpha: 0, Beta: 1}, []ConstantTerm{{"rougeL_f1", 0.1}, {"hit", 1}}},
		{"two turns, one text", []rollout.Record{
			{PromptID: "eval/c#1", Rewrite: "why", RougeF1: 0.1, Hit: 1}, {PromptID: "eval/d#1", Rewrite: "why", RougeF1: 0.1, Hit: 1}},
			hser.Weights{Alpha: 0, Beta: 1}, []ConstantTerm{{"rougeL_f1", 0.1}, {"hit", 1}}},
	}
	for _, c := range cases {
		if c.name == "a failed rollout is not scored" && !c.recs[1].Failed() {
			t.Fatal("the test's failed record is not Failed()")
		}
		if got := constantTerms(c.recs, hser.Config{Weights: c.w}); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	if cause := likelyCause(ConstantTerm{"hit", 1}); !strings.Contains(cause, "reward.hit: answer") || !strings.Contains(cause, "extractive") {
		t.Errorf("hit≡1 cause: %s", cause)
	}
}

// The test loop's responder answers with a word of the retrieved chunk, so
// Hit (the answer occurs in the retrieved text) is 1 on every rollout, as
// with the default reward.hit: answer and the extractive responder; its
// answers never equal "paris france", so EM is 0 on every rollout. The
// greedy evaluation's answers ("where is it" → "it") also score Rouge-L 0
// throughout. Each constant term is named on its step's or eval's metrics
// line and in status.json, and warned about once per session, not once per
// step.
func TestConstantRewardTermsAreWarnedOnce(t *testing.T) {
	run, err := rundir.Open(t.TempDir(), "r", rundir.New)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	pol := newFakePolicy(" paris", "", " france", "")
	tr := newTestLoop(t, testConfig(), pol, run)
	tr.deps.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	tr.log = tr.deps.Logger
	if err := tr.Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(run.File("metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m struct {
			Kind          string   `json:"kind"`
			ConstantTerms []string `json:"constant_terms"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		kinds[m.Kind]++
		want := map[string][]string{"step": {"em", "hit"}, "eval": {"rougeL_f1", "em", "hit"}}[m.Kind]
		if !reflect.DeepEqual(m.ConstantTerms, want) {
			t.Errorf("%s line: constant_terms %q, want %q: %s", m.Kind, m.ConstantTerms, want, line)
		}
	}
	if kinds["step"] != 2 || kinds["eval"] < 1 {
		t.Fatalf("metrics lines %v", kinds)
	}
	out := logs.String()
	for _, term := range []string{"term=rougeL_f1", "term=hit", "term=em"} {
		if n := strings.Count(out, "level=WARN msg=\"reward term is constant"); n != 3 || strings.Count(out, term) != 1 {
			t.Fatalf("want one WARN per constant term (3), got %d:\n%s", n, out)
		}
	}
	if !strings.Contains(out, "reward.hit: gold") {
		t.Errorf("WARN lacks the likely cause:\n%s", out)
	}
	st, ok, err := ReadStatus(run.Path)
	if err != nil || !ok || len(st.Warnings) != 3 || !strings.Contains(st.Warnings[2], "reward term hit is 1 on every rollout (first at eval at step 0)") {
		t.Fatalf("status.json warnings %q (%v, %v)", st.Warnings, ok, err)
	}
}
