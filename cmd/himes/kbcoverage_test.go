package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/himes-rl/himes/datasets"
)

func judgedTurn(rels map[string]int) datasets.Turn {
	var t datasets.Turn
	for id, r := range rels {
		r := r
		t.Passages = append(t.Passages, datasets.PassageRef{ID: id, Relevance: &r})
	}
	return t
}

func kbOf(ids ...string) func(string) (bool, bool) {
	set := map[string]bool{}
	for _, id := range ids {
		set[id] = true
	}
	return func(id string) (bool, bool) { return set[id], true }
}

// Three distinct relevant passages (p1 twice, p4 graded 0 so not counted):
// the KB holding p1 covers 1 of 3; holding none is an error; no KB to ask
// checks nothing.
func TestJudgedCoverage(t *testing.T) {
	turns := []datasets.Turn{
		judgedTurn(map[string]int{"p1": 2, "p2": 1, "p4": 0}),
		judgedTurn(map[string]int{"p1": 1, "p3": 1}),
		{}, // unjudged
	}
	split := []judgedSplit{{"data.eval", "eval.jsonl", turns}}

	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	if err := checkJudgedCoverage("kb.jsonl", split, kbOf("p1", "p4"), log); err != nil {
		t.Fatalf("partial coverage must warn, not fail: %v", err)
	}
	for _, want := range []string{"level=WARN", "split=data.eval", "judged=3", "in_kb=1", "missing=2", `e.g.="p2, p3"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("warning lacks %q: %s", want, buf.String())
		}
	}

	buf.Reset()
	err := checkJudgedCoverage("kb.jsonl", split, kbOf("p4", "other"), log)
	if err == nil {
		t.Fatal("a KB with none of the judged passages was accepted")
	}
	for _, want := range []string{"data.kb kb.jsonl", "none of the 3 passages", "data.eval eval.jsonl", "p1, p2, p3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}

	buf.Reset()
	if err := checkJudgedCoverage("kb.jsonl", split, kbOf("p1", "p2", "p3"), log); err != nil || buf.Len() != 0 {
		t.Errorf("full coverage: err %v, log %q", err, buf.String())
	}
	noKB := func(string) (bool, bool) { return false, false }
	if err := checkJudgedCoverage("", split, noKB, log); err != nil || buf.Len() != 0 {
		t.Errorf("no KB to ask: err %v, log %q", err, buf.String())
	}
}
