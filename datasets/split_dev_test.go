package datasets

import (
	"fmt"
	"slices"
	"testing"
)

// TestRunSplitsDevDeterministicDisjointByConversation: with
// data.dev_fraction the dev split is carved from the training conversations
// only, whole conversations at a time, the same for the same ids and seed
// whatever the input order, and disjoint from train and eval.
func TestRunSplitsDevDeterministicDisjointByConversation(t *testing.T) {
	var all []Turn
	for c := range 20 {
		for k := 1; k <= 3; k++ {
			all = append(all, Turn{ConvID: fmt.Sprintf("c%02d", c), Turn: k})
		}
	}
	cfg := Config{EvalFraction: 0.2, DevFraction: 0.25}
	train, eval, dev := RunSplits(all, nil, cfg, 7)
	convs := func(ts []Turn) []string {
		var out []string
		for _, t := range ts {
			if !slices.Contains(out, t.ConvID) {
				out = append(out, t.ConvID)
			}
		}
		slices.Sort(out)
		return out
	}
	// 20 conversations: round(0.2·20) = 4 held out, round(0.25·16) = 4 dev, 12 train.
	if n := [3]int{len(convs(train)), len(convs(eval)), len(convs(dev))}; n != [3]int{12, 4, 4} {
		t.Fatalf("conversations train/eval/dev = %v, want [12 4 4]", n)
	}
	if len(train)+len(eval)+len(dev) != len(all) {
		t.Fatalf("%d+%d+%d turns, want %d", len(train), len(eval), len(dev), len(all))
	}
	where := map[string]string{}
	for name, part := range map[string][]Turn{"train": train, "eval": eval, "dev": dev} {
		for _, tr := range part {
			if w, ok := where[tr.ConvID]; ok && w != name {
				t.Errorf("conversation %s is in both %s and %s", tr.ConvID, w, name)
			}
			where[tr.ConvID] = name
		}
	}
	for _, part := range [][]Turn{train, eval, dev} {
		for _, c := range convs(part) {
			n := 0
			for _, t := range part {
				if t.ConvID == c {
					n++
				}
			}
			if n != 3 {
				t.Errorf("conversation %s has %d of its 3 turns in one part: split inside a conversation", c, n)
			}
		}
	}
	// Deterministic: again, and on the input reversed.
	rev := slices.Clone(all)
	slices.Reverse(rev)
	_, eval2, dev2 := RunSplits(rev, nil, cfg, 7)
	if !slices.Equal(convs(dev2), convs(dev)) || !slices.Equal(convs(eval2), convs(eval)) {
		t.Errorf("reversed input: dev %v eval %v, want %v %v", convs(dev2), convs(eval2), convs(dev), convs(eval))
	}
	_, _, dev3 := RunSplits(all, nil, cfg, 7)
	if !slices.EqualFunc(dev3, dev, sameTurn) {
		t.Error("the same call gave another dev split")
	}
	// Off: the splits of before, no dev.
	tr0, ev0, dev0 := RunSplits(all, nil, Config{EvalFraction: 0.2}, 7)
	wantTr, wantEv := SplitByConversation(all, 0.2, 7)
	if dev0 != nil || !slices.EqualFunc(tr0, wantTr, sameTurn) || !slices.EqualFunc(ev0, wantEv, sameTurn) {
		t.Errorf("dev_fraction 0 changed the split: dev %d turns", len(dev0))
	}
	// data.eval given: it is the eval set, and dev comes out of all.
	held := []Turn{{ConvID: "other", Turn: 1}}
	tr4, ev4, dev4 := RunSplits(all, held, Config{Eval: "held.jsonl", EvalFraction: 0.2, DevFraction: 0.25}, 7)
	if !slices.EqualFunc(ev4, held, sameTurn) || len(convs(dev4)) != 5 || len(convs(tr4)) != 15 {
		t.Errorf("with data.eval: eval %v, dev %d and train %d conversations, want the file, 5 and 15", ev4, len(convs(dev4)), len(convs(tr4)))
	}
}

func sameTurn(a, b Turn) bool { return a.ID() == b.ID() }
