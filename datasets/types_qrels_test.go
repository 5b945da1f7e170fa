package datasets

import (
	"maps"
	"testing"
)

// Qrels: unknown relevance counts 1, a passage listed twice keeps its
// highest grade whichever comes last (the in-loop evaluation once kept the
// last one and could disagree with himes eval on the same turn).
func TestTurnQrels(t *testing.T) {
	two, zero, one := 2, 0, 1
	tu := Turn{Passages: []PassageRef{
		{ID: "a", Relevance: &two}, {ID: "b"}, {ID: "a", Relevance: &one}, {ID: "c", Relevance: &zero}, {ID: "c", Relevance: &one},
	}}
	want := map[string]int{"a": 2, "b": 1, "c": 1}
	if got := tu.Qrels(); !maps.Equal(got, want) {
		t.Errorf("Qrels() = %v, want %v", got, want)
	}
	if got := (Turn{}).Qrels(); len(got) != 0 {
		t.Errorf("no passages: %v", got)
	}
}
