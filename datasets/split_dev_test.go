package datasets

import (
	"fmt"
	"slices"
	"strings"
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
	train, eval, dev, _ := RunSplits(all, nil, cfg, 7)
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
	_, eval2, dev2, _ := RunSplits(rev, nil, cfg, 7)
	if !slices.Equal(convs(dev2), convs(dev)) || !slices.Equal(convs(eval2), convs(eval)) {
		t.Errorf("reversed input: dev %v eval %v, want %v %v", convs(dev2), convs(eval2), convs(dev), convs(eval))
	}
	_, _, dev3, _ := RunSplits(all, nil, cfg, 7)
	if !slices.EqualFunc(dev3, dev, sameTurn) {
		t.Error("the same call gave another dev split")
	}
	// Off: the splits of before, no dev.
	tr0, ev0, dev0, _ := RunSplits(all, nil, Config{EvalFraction: 0.2}, 7)
	wantTr, wantEv := SplitByConversation(all, 0.2, 7)
	if dev0 != nil || !slices.EqualFunc(tr0, wantTr, sameTurn) || !slices.EqualFunc(ev0, wantEv, sameTurn) {
		t.Errorf("dev_fraction 0 changed the split: dev %d turns", len(dev0))
	}
	// data.eval given: it is the eval set, and dev comes out of all.
	held := []Turn{{ConvID: "other", Turn: 1}}
	tr4, ev4, dev4, _ := RunSplits(all, held, Config{Eval: "held.jsonl", EvalFraction: 0.2, DevFraction: 0.25}, 7)
	if !slices.EqualFunc(ev4, held, sameTurn) || len(convs(dev4)) != 5 || len(convs(tr4)) != 15 {
		t.Errorf("with data.eval: eval %v, dev %d and train %d conversations, want the file, 5 and 15", ev4, len(convs(dev4)), len(convs(tr4)))
	}
}

func sameTurn(a, b Turn) bool { return a.ID() == b.ID() }

// data.dev_group: meta.collection takes dev_fraction of each collection's
// conversations. Collection "big" has 18 conversations and "small" 2: over
// all 20 at once a 10% dev split holds 2 conversations, which may all be
// big's; per group it holds round(.1·18) = 2 of big's and 1 of small's (at
// least one per group of ≥ 2).
func TestRunSplitsDevGroupTakesEveryGroup(t *testing.T) {
	var all []Turn
	add := func(coll string, n int) {
		for c := range n {
			for k := 1; k <= 2; k++ {
				all = append(all, Turn{ConvID: fmt.Sprintf("%s%02d", coll, c), Turn: k, Meta: map[string]any{"collection": coll}})
			}
		}
	}
	add("big", 18)
	add("small", 2)
	cfg := Config{DevFraction: 0.1, DevGroup: "meta.collection"}
	train, _, dev, err := RunSplits(all, nil, cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]map[string]bool{}
	for _, d := range dev {
		g := d.Meta["collection"].(string)
		if count[g] == nil {
			count[g] = map[string]bool{}
		}
		count[g][d.ConvID] = true
	}
	if len(count["big"]) != 2 || len(count["small"]) != 1 {
		t.Fatalf("dev conversations per group: big %d, small %d; want 2 and 1", len(count["big"]), len(count["small"]))
	}
	if len(train)+len(dev) != len(all) {
		t.Fatalf("train %d + dev %d != %d turns", len(train), len(dev), len(all))
	}
	for _, tr := range train {
		if count[tr.Meta["collection"].(string)][tr.ConvID] {
			t.Fatalf("conversation %s is in train and dev", tr.ConvID)
		}
	}

	// A turn without the key, or a conversation in two groups, is an error naming it.
	bad := slices.Clone(all)
	bad[5] = Turn{ConvID: bad[5].ConvID, Turn: bad[5].Turn}
	if _, _, _, err := RunSplits(bad, nil, cfg, 3); err == nil || !strings.Contains(err.Error(), "has no meta.collection") {
		t.Errorf("turn without the key: %v", err)
	}
	bad = slices.Clone(all)
	bad[1] = Turn{ConvID: bad[1].ConvID, Turn: bad[1].Turn, Meta: map[string]any{"collection": "small"}}
	if _, _, _, err := RunSplits(bad, nil, cfg, 3); err == nil || !strings.Contains(err.Error(), "in groups") {
		t.Errorf("conversation in two groups: %v", err)
	}
	if err := (Config{Train: "x", DevGroup: "collection"}).Validate(); err == nil || !strings.Contains(err.Error(), "dev_group") {
		t.Errorf("dev_group without meta.: %v", err)
	}
}
