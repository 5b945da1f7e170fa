package memory

import (
	"math"
	"testing"
)

// Score against values computed by hand from its formula.
func TestMemoryScoreHandComputed(t *testing.T) {
	sig := Signals{Semantic: 1, Topic: 0.4, Recency: 0.2, Importance: 0.5, Entities: 0.3}
	ql := Label{Topic: "food", Subtopic: "diet"}
	q := map[string]bool{"vegetarian": true, "restaurant": true}
	e := Entry{Topic: "food", Subtopic: "diet", Seq: 2, Importance: 0.8, Entities: []string{"vegetarian", "netherlands"}}
	// 1·0.5 + 0.4·1 + 0.2·2^(−(5−2)/3) + 0.5·0.8 + 0.3·(1/2) = 0.5+0.4+0.1+0.4+0.15
	if got := Score(sig, 3, 0.5, ql, 5, q, e); math.Abs(got-1.55) > 1e-12 {
		t.Errorf("same label: got %v, want 1.55", got)
	}
	// same topic only (0.5·0.4), a fact (no recency), no importance, no entity
	f := Entry{Topic: "food", Subtopic: "recipes", Entities: []string{"peanuts"}}
	if got := Score(sig, 3, 0.25, ql, 5, q, f); math.Abs(got-(0.25+0.2)) > 1e-12 {
		t.Errorf("same topic, fact: got %v, want 0.45", got)
	}
	// a later question (Seq ≥ seq) earns no recency; weights 0 are off
	g := Entry{Topic: "travel", Subtopic: "x", Seq: 7, Importance: 1}
	if got := Score(Signals{Semantic: 2, Recency: 1}, 3, 0.1, ql, 5, q, g); math.Abs(got-0.2) > 1e-12 {
		t.Errorf("off signals: got %v, want 0.2", got)
	}
}

func TestMemoryVariants(t *testing.T) {
	base := DefaultConfig()
	base.Signals = Signals{Semantic: 1, Topic: 0.5}
	paper, err := base.Variant("paper")
	if err != nil || paper.RetrievalWeight != 0 || paper.RerankFloor != 0 || paper.Signals != (Signals{Semantic: 1}) {
		t.Fatalf("paper: %+v %v", paper, err)
	}
	plus, _ := base.Variant("+topic")
	if plus.Signals != (Signals{Semantic: 1, Topic: 0.5}) {
		t.Errorf("+topic keeps the configured weight: %+v", plus.Signals)
	}
	rec, _ := base.Variant("+recency")
	if rec.Signals != (Signals{Semantic: 1, Recency: 1}) || rec.RetrievalWeight != base.RetrievalWeight {
		t.Errorf("+recency: %+v", rec)
	}
	no, _ := base.Variant("no-topic")
	if no.Signals != (Signals{Semantic: 1}) {
		t.Errorf("no-topic: %+v", no.Signals)
	}
	for _, bad := range []string{"topic", "+semantic", "no-colour", ""} {
		if _, err := base.Variant(bad); err == nil {
			t.Errorf("variant %q accepted", bad)
		}
	}
	for _, name := range Variants {
		if _, err := base.Variant(name); err != nil && name != "no-semantic" {
			t.Errorf("listed variant %q: %v", name, err)
		}
	}
}
