package datasets

import (
	"strings"
	"testing"
)

func TestPromptTurnsKeepAnsweredAndOptionallyJudged(t *testing.T) {
	turns := []Turn{
		{ConvID: "a", Turn: 1, Answer: "x", Passages: []PassageRef{{ID: "p1"}}},
		{ConvID: "a", Turn: 2, Answer: "y"},                        // unjudged
		{ConvID: "a", Turn: 3, Passages: []PassageRef{{ID: "p2"}}}, // no answer
		{ConvID: "b", Turn: 1, Answer: "z", Passages: []PassageRef{{ID: "p3"}}},
	}
	ids := func(ts []Turn) string {
		var s []string
		for _, t := range ts {
			s = append(s, t.ID())
		}
		return strings.Join(s, ",")
	}
	if got := ids(PromptTurns(turns, false)); got != "a#1,a#2,b#1" {
		t.Errorf("answered turns %s", got)
	}
	if got := ids(PromptTurns(turns, true)); got != "a#1,b#1" {
		t.Errorf("answered and judged turns %s", got)
	}
}
