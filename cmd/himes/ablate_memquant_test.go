package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/ablate"
	"github.com/himes-rl/himes/internal/sharedtest"
)

// The command end to end on the demo knowledge base with two labelled,
// judged conversations: float32 agrees with itself exactly, bytes follow
// from hash_dim 32 (codes + 12 bytes), and every output is written.
func TestAblateMemoryQuantCLI(t *testing.T) {
	root := sharedtest.RepoRoot(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "labelled.jsonl")
	var lines bytes.Buffer
	qs := [][]string{
		{"How do I fix my garage door opener?", "Why does the garage door not close?", "What do openers cost?"},
		{"Tell me about Salt Lake City.", "What is its main economic activity?"},
	}
	ptkb := map[string]string{"1": "I own a garage door opener.", "2": "I live in Utah.", "3": "I like skiing in the mountains."}
	labelled, judgedTurns := 0, 0
	for c, conv := range qs {
		for i, q := range conv {
			rec := map[string]any{"conv_id": []string{"u-garage", "u-utah"}[c], "turn": i + 1, "question": q,
				"answer": "an answer", "rewrite": q, "history": []any{},
				"passages": []map[string]any{{"id": []string{"MARCO_3942603", "MARCO_4589245"}[c], "relevance": 1}},
				"meta":     map[string]any{"ptkb": ptkb, "ptkb_provenance": []string{[]string{"1", "2"}[c]}}}
			labelled++
			judgedTurns++
			b, _ := json.Marshal(rec)
			lines.Write(append(b, '\n'))
		}
	}
	// a turn without a human rewrite: the gold rewriter leaves it out
	lines.WriteString(`{"conv_id": "u-garage", "turn": 4, "question": "And remotes?", "answer": "a", "history": [], "passages": [{"id": "MARCO_1381085", "relevance": 1}], "meta": {"ptkb": {"1": "I own a garage door opener.", "2": "I live in Utah.", "3": "I like skiing in the mountains."}, "ptkb_provenance": ["1"]}}` + "\n")
	labelled++
	judgedTurns++
	if err := os.WriteFile(data, lines.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "mq")
	md, err := runCLI(t, "ablate", "memory-quant", "--config", filepath.Join(root, "configs", "quickstart.yaml"),
		"--set", "retrieval.hash_dim=32", "--set", "data.memory_field=meta.ptkb",
		"--set", "data.memory_labels_field=meta.ptkb_provenance", "--data", data, "--out", out, "--resamples", "200")
	if err != nil {
		t.Fatal(err)
	}
	var sets []ablate.MemQuantSet
	b, err := os.ReadFile(filepath.Join(out, "memquant.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sets); err != nil {
		t.Fatal(err)
	}
	if len(sets) != 1 || len(sets[0].Rows) != 9 || sets[0].Labelled != labelled || sets[0].Judged != judgedTurns || sets[0].Dim != 32 {
		t.Fatalf("sets %+v", sets)
	}
	wantBytes := map[string]int{"float32": 128, "q8": 44, "q8+rot": 44, "q4": 28, "q4+rot": 28, "q2": 20, "q2+rot": 20, "q1": 16, "q1+rot": 16}
	for i, r := range sets[0].Rows {
		if r.BytesPerMemory != wantBytes[r.Variant] {
			t.Errorf("%s: %d bytes per memory, want %d", r.Variant, r.BytesPerMemory, wantBytes[r.Variant])
		}
		if r.DeltaR10 == nil || r.DeltaNDCG3 == nil || r.DeltaMemRec == nil {
			t.Fatalf("%s: missing deltas", r.Variant)
		}
		if !(r.OverlapK >= 0 && r.OverlapK <= 1) || !(r.TauB >= -1 && r.TauB <= 1) {
			t.Errorf("%s: overlap %v, τ-b %v out of range", r.Variant, r.OverlapK, r.TauB)
		}
		if i > 0 {
			continue
		}
		if r.Variant != "float32" || r.OverlapK != 1 || r.TauB != 1 || r.MemOverlap != 1 || r.DecisionFlips != 0 {
			t.Fatalf("float32 against itself: %+v", r)
		}
		for _, d := range []float64{r.DeltaR10.Diff, r.DeltaR10.Lo, r.DeltaR10.Hi, r.DeltaNDCG3.Diff, r.DeltaMemRec.Diff, r.DeltaMemRec.Hi} {
			if d != 0 {
				t.Fatalf("float32 against itself: deltas %+v %+v %+v", r.DeltaR10, r.DeltaNDCG3, r.DeltaMemRec)
			}
		}
	}
	if sets[0].FloatMemRec == nil || sets[0].FloatR10 == nil {
		t.Fatal("float32 estimates missing")
	}
	png, err := os.ReadFile(filepath.Join(out, "memquant-labelled.png"))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("plot: %v", err)
	}
	saved, err := os.ReadFile(filepath.Join(out, "memquant.md"))
	if err != nil || string(saved) != md || !strings.Contains(md, "| q1+rot | 16 |") {
		t.Fatalf("markdown: %v\n%s", err, md)
	}
	if _, err := runCLI(t, "ablate", "memory-quant", "--config", filepath.Join(root, "configs", "quickstart.yaml"),
		"--set", "retrieval.hash_dim=32", "--data", data, "--rewriter", "gold", "--out", out, "--resamples", "50"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(out, "memquant.json"))
	if err := json.Unmarshal(b, &sets); err != nil || sets[0].Skipped != 1 || sets[0].Turns != judgedTurns-1 || sets[0].Rewriter != "gold" {
		t.Fatalf("gold: %v, %+v", err, sets[0])
	}
	if _, err := runCLI(t, "ablate", "memory-quant", "--config", filepath.Join(root, "configs", "quickstart.yaml"),
		"--rewriter", "policy", "--out", out); err == nil || !strings.Contains(err.Error(), "--rewriter") {
		t.Fatalf("unknown rewriter: %v", err)
	}
}
