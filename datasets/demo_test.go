package datasets

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// The quickstart trains on datasets/demo; these are the properties it relies on.
func TestDemoInvariants(t *testing.T) {
	dir := filepath.Join(sharedtest.RepoRoot(t), "datasets", "demo")
	train, _, err := LoadContext(t.Context(), filepath.Join(dir, "train.jsonl"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eval, _, err := LoadContext(t.Context(), filepath.Join(dir, "eval.jsonl"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(train) < 230 || len(train) > 290 {
		t.Errorf("train has %d turns, want about 250", len(train))
	}
	if len(eval) < 70 || len(eval) > 100 {
		t.Errorf("eval has %d turns, want about 80", len(eval))
	}

	kb := map[string]bool{}
	f, err := os.Open(filepath.Join(dir, "passages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var p struct{ ID, Text string }
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil || p.ID == "" || p.Text == "" {
			t.Fatalf("passages.jsonl:%d: want {id, text}: %v", line, err)
		}
		if kb[p.ID] {
			t.Errorf("passages.jsonl:%d: duplicate id %s", line, p.ID)
		}
		kb[p.ID] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	trainConv := map[string]bool{}
	referenced := map[string]bool{}
	check := func(split string, ts []Turn) {
		for _, tr := range ts {
			if tr.Turn < 2 || tr.Question == "" || !tr.HasRewrite() || tr.Answer == "" || len(tr.Passages) == 0 || len(tr.History) == 0 {
				t.Errorf("%s %s: want turn > 1 with history, question, rewrite, answer and passages", split, tr.ID())
			}
			for _, p := range tr.Passages {
				referenced[p.ID] = true
				if !kb[p.ID] {
					t.Errorf("%s %s: passage %s is not in passages.jsonl", split, tr.ID(), p.ID)
				}
			}
		}
	}
	check("train", train)
	check("eval", eval)
	for _, tr := range train {
		trainConv[tr.ConvID] = true
	}
	for _, tr := range eval {
		if trainConv[tr.ConvID] {
			t.Errorf("conversation %s is in both train and eval", tr.ConvID)
		}
	}
	// Distractors make retrieval non-trivial: most of the KB is not gold.
	if distractors := len(kb) - len(referenced); distractors < 900 {
		t.Errorf("%d distractor passages, want about 1000", distractors)
	}
	var total int64
	for _, name := range []string{"train.jsonl", "eval.jsonl", "passages.jsonl", "README.md"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		total += st.Size()
	}
	if total > 4_200_000 {
		t.Errorf("demo is %d bytes, want about 4 MB at most", total)
	}
}

// Every demo passage line is a verbatim line of the shared knowledge base,
// and every demo turn equals its source turn (less the dropped passage text).
func TestDemoMatchesSharedData(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): reads the whole shared knowledge base and conversations")
	}
	data := sharedtest.SharedDir(t)
	dir := filepath.Join(sharedtest.RepoRoot(t), "datasets", "demo")
	kbRaw, err := os.ReadFile(filepath.Join(data, "kb", "passages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	kbLines := map[string]bool{}
	for _, l := range bytes.Split(kbRaw, []byte("\n")) {
		kbLines[string(l)] = true
	}
	demoRaw, err := os.ReadFile(filepath.Join(dir, "passages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range bytes.Split(bytes.TrimRight(demoRaw, "\n"), []byte("\n")) {
		if !kbLines[string(l)] {
			t.Errorf("passages.jsonl:%d is not a line of the shared kb/passages.jsonl", i+1)
		}
	}
	src := map[string]Turn{}
	for _, f := range []string{"cast2020.jsonl", "cast2021.jsonl", "mtrag_human_eval_subset.jsonl"} {
		ts, _, err := LoadContext(t.Context(), filepath.Join(data, "conversations", f), LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range ts {
			src[tr.ID()] = tr
		}
	}
	for _, name := range []string{"train.jsonl", "eval.jsonl"} {
		ts, _, err := LoadContext(t.Context(), filepath.Join(dir, name), LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range ts {
			want, ok := src[tr.ID()]
			if !ok {
				t.Errorf("%s: %s is not a turn of the shared files", name, tr.ID())
				continue
			}
			if tr.Question != want.Question || *tr.Rewrite != *want.Rewrite || tr.Answer != want.Answer ||
				len(tr.History) != len(want.History) || len(tr.Passages) != len(want.Passages) {
				t.Errorf("%s: %s differs from the shared turn", name, tr.ID())
				continue
			}
			for i := range tr.Passages {
				if tr.Passages[i].ID != want.Passages[i].ID {
					t.Errorf("%s: %s passage %d is %s, shared has %s", name, tr.ID(), i, tr.Passages[i].ID, want.Passages[i].ID)
				}
			}
		}
	}
}
