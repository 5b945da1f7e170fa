package datasets

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

func TestSplitByConversationShared(t *testing.T) {
	data := sharedtest.SharedDir(t)
	turns, _, err := LoadContext(t.Context(), filepath.Join(data, "conversations", "cast2020.jsonl"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	train, eval := SplitByConversation(turns, 0.2, 7)
	if len(train)+len(eval) != len(turns) {
		t.Fatalf("%d + %d turns, want %d", len(train), len(eval), len(turns))
	}
	trainConv, evalConv := convSet(train), convSet(eval)
	for c := range evalConv {
		if trainConv[c] {
			t.Errorf("conversation %s is in both splits", c)
		}
	}
	// 25 conversations × 0.2 = 5 held out.
	if len(evalConv) != 5 || len(trainConv) != 20 {
		t.Errorf("%d train and %d eval conversations, want 20 and 5", len(trainConv), len(evalConv))
	}
	// Input order is kept within each split.
	if !isSubsequence(train, turns) || !isSubsequence(eval, turns) {
		t.Error("a split does not keep the input order")
	}
	// Same seed, same split; the split does not depend on input order.
	rev := append([]Turn(nil), turns...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	_, eval2 := SplitByConversation(rev, 0.2, 7)
	if !reflect.DeepEqual(convSet(eval2), evalConv) {
		t.Error("the held-out conversations depend on the input order")
	}
	// Another seed holds out other conversations (for this file and seeds 7, 8).
	_, eval3 := SplitByConversation(turns, 0.2, 8)
	if reflect.DeepEqual(convSet(eval3), evalConv) {
		t.Error("seeds 7 and 8 hold out the same conversations")
	}
}

func TestSplitEdgeCases(t *testing.T) {
	turns := []Turn{{ConvID: "a", Turn: 1}, {ConvID: "a", Turn: 2}, {ConvID: "b", Turn: 1}}
	if train, eval := SplitByConversation(turns, 0, 1); len(train) != 3 || len(eval) != 0 {
		t.Errorf("fraction 0: %d/%d", len(train), len(eval))
	}
	// A tiny fraction still holds out one of two conversations, and a large
	// one keeps one for training.
	for _, f := range []float64{0.01, 0.99} {
		train, eval := SplitByConversation(turns, f, 1)
		if len(convSet(train)) != 1 || len(convSet(eval)) != 1 {
			t.Errorf("fraction %v: %d train and %d eval conversations, want 1 and 1", f, len(convSet(train)), len(convSet(eval)))
		}
	}
	if train, eval := SplitByConversation(turns[:2], 0.9, 1); len(train) != 2 || len(eval) != 0 {
		t.Errorf("a single conversation belongs to train: %d/%d", len(train), len(eval))
	}
	if train, eval := SplitByConversation(nil, 0.5, 1); train != nil || eval != nil {
		t.Error("no turns, no splits")
	}
}

func convSet(ts []Turn) map[string]bool {
	s := map[string]bool{}
	for _, t := range ts {
		s[t.ConvID] = true
	}
	return s
}

func isSubsequence(sub, all []Turn) bool {
	j := 0
	for _, t := range all {
		if j < len(sub) && sub[j].ID() == t.ID() {
			j++
		}
	}
	return j == len(sub)
}
