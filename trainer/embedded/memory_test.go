package embedded

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/himes-rl/himes/trainer"
)

// bronzeWithMemories is bronze() with two activated memories: "crete",
// "archaeology", "teach", "hittite" and "empire" occur only in them;
// "mediterranean" is also in the history, "collapse" in the question.
func bronzeWithMemories() trainer.Prompt {
	p := bronze()
	d := *p.Dialogue
	d.Memories = []trainer.DialogueMemory{
		{ID: "f1", Text: "I teach Mediterranean archaeology in Crete", Score: 0.8},
		{ID: "q:c#1", Text: "Collapse of the Hittite empire", Score: 0.5},
	}
	p.Dialogue = &d
	return p
}

// from_memory by hand: memory-only terms come after the user-turn terms,
// in memory order, before the assistant-only terms; their history features
// are 0 and from_memory 1; a memory word the history has keeps its history
// features (from_memory 0).
func TestFromMemoryFeatureByHand(t *testing.T) {
	stats := mapStats{"bronze": 4.5, "crete": 3}
	cands, _ := candidates(contextOf(bronzeWithMemories()), stats, 64)
	var terms []string
	for _, c := range cands {
		terms = append(terms, c.term)
	}
	want := []string{"civilizations", "fell", "bronze", "age",
		"teach", "archaeology", "crete", "hittite", "empire",
		"late", "happened", "around", "1177", "bc", "mediterranean"}
	if !reflect.DeepEqual(terms, want) {
		t.Fatalf("candidates = %v, want %v", terms, want)
	}
	// bias log_tf idf recency user asst cap first lastUser num log_len,
	// log_user_tf lastAsst in_kb npmi_max npmi_mean q_content q_anaphor lead
	// npmi_gap from_memory; the question has 2 content words: 2/5.
	wantCrete := [numFeatures]float64{1, 0, 3, 0, 0, 0, 1, 0, 0, 0, math.Log(5),
		0, 0, 0, 0, 0, 0.4, 0, 0, 0, 1}
	wantEmpire := [numFeatures]float64{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, math.Log(6),
		0, 0, 0, 0, 0, 0.4, 0, 0, 0, 1}
	if cands[6].phi != wantCrete {
		t.Errorf("φ(crete) = %v, want %v", cands[6].phi, wantCrete)
	}
	if cands[8].phi != wantEmpire {
		t.Errorf("φ(empire) = %v, want %v", cands[8].phi, wantEmpire)
	}
	// the history terms' features are those of the prompt without memories
	plain, _ := candidates(contextOf(bronze()), stats, 64)
	byTerm := map[string]candidate{}
	for _, c := range plain {
		byTerm[c.term] = c
	}
	for _, c := range cands {
		if p, ok := byTerm[c.term]; ok && (p.phi != c.phi || p.first != c.first) {
			t.Errorf("%s: φ %v first %d with memories, %v %d without", c.term, c.phi, c.first, p.phi, p.first)
		}
	}
	if cands[4].first != 10 || cands[8].first != 14 {
		t.Errorf("memory terms' first-occurrence ranks %d, %d: want 10, 14 (after the history's)", cands[4].first, cands[8].first)
	}
	// the cap keeps a prefix of the ranking
	if capped, trunc := candidates(contextOf(bronzeWithMemories()), stats, 6); !trunc || len(capped) != 6 || capped[5].term != "archaeology" {
		t.Errorf("cap 6: %v", capped)
	}
}

// A policy that keeps exactly the from_memory terms appends them after the
// question; the same policy on the prompt without memories returns the
// question; and memories that add no term (every word in the history, the
// question or the stopwords) leave samples, tokens and logprobs unchanged.
func TestMemoriesInSamples(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	for k := range e.st.w {
		e.st.w[k] = 0
	}
	e.st.w[featBias], e.st.w[featFromMemory] = -1, 5
	greedy := func(p trainer.Prompt) string {
		res, err := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{p}, Temperature: 0})
		if err != nil {
			t.Fatal(err)
		}
		return res.Samples[0].Text
	}
	if got, want := greedy(bronzeWithMemories()), "What caused the collapse? teach archaeology crete hittite empire"; got != want {
		t.Errorf("with memories: %q, want %q", got, want)
	}
	if got, want := greedy(bronze()), "What caused the collapse?"; got != want {
		t.Errorf("without memories: %q, want %q", got, want)
	}

	e2 := newTestEmbedded(t, mapStats{"bronze": 4.5, "fell": 2})
	same := bronze()
	d := *same.Dialogue
	d.Memories = []trainer.DialogueMemory{{ID: "f1", Text: "The Bronze Age collapse, which civilizations fell"}}
	same.Dialogue = &d
	req := func(p trainer.Prompt) trainer.SampleRequest {
		return trainer.SampleRequest{Prompts: []trainer.Prompt{p}, N: 8, Temperature: 1, Seed: 11}
	}
	a, err := e2.Sample(ctx, req(bronze()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := e2.Sample(ctx, req(same))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("memories that add no term changed the samples:\n%+v\n%+v", a, b)
	}
	// no memories: the dialogue's JSON has no memories key, so request
	// hashes (step-id replay) and wire bytes are unchanged
	raw, _ := json.Marshal(bronze())
	if strings.Contains(string(raw), "memories") {
		t.Errorf("prompt without memories encodes %s", raw)
	}
}

// A checkpoint of the build before from_memory (20 features) loads with
// from_memory's weight and moments 0; it is verified against its checksum
// as written.
func TestLoadCheckpointWithoutFromMemory(t *testing.T) {
	e := newTestEmbedded(t, nil)
	n := numFeatures - 1
	w, m, v := make([]float64, n), make([]float64, n), make([]float64, n)
	for k := range w {
		w[k], m[k], v[k] = 0.1*float64(k+1), 0.01, 0.001
	}
	cf := checkpointFile{Format: checkpointFormat, RunID: "r", Features: featureNames[:n], CreatedAt: time.Unix(0, 0).UTC(),
		PolicyVersion: 7, Weights: w, AdamM: m, AdamV: v, AdamT: 7, Reference: w}
	sum, err := cf.checksum()
	if err != nil {
		t.Fatal(err)
	}
	cf.Checksum = sum
	raw, _ := json.Marshal(cf)
	if err := os.WriteFile(filepath.Join(e.cfg.CheckpointDir, "before.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Load(context.Background(), trainer.LoadRequest{StepID: "l", Name: "before"}); err != nil {
		t.Fatal(err)
	}
	got := e.Weights()
	if len(got) != numFeatures || got[featFromMemory] != 0 || !reflect.DeepEqual(got[:n], w) || e.st.version != 7 {
		t.Errorf("loaded weights %v (version %d), want %v then 0", got, e.st.version, w)
	}
	if len(e.st.m) != numFeatures || e.st.m[featFromMemory] != 0 || len(e.st.ref) != numFeatures || e.st.ref[featFromMemory] != 0 {
		t.Errorf("moments/reference not padded: m %v ref %v", e.st.m, e.st.ref)
	}
}
