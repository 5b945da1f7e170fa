package embedded

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/trainer"
)

// The candidate vector file: the candidate terms of every turn of the demo
// data and the shared judged collections, and of a few hand-made dialogues,
// in the order the embedded policy ranks them (PROTOCOL.md, "The embedded
// policy"). Any other implementation of token_kind "decisions" (the
// reference trainer's MiniLM tagger, scripts/lora_trainer) reads it to prove
// it proposes exactly these terms in exactly this order, so decisions mean
// the same thing on both sides.
//
// A line names where its dialogue comes from ("source": a repository path,
// "shared:" + a path under ../shared/data, or "inline" with the dialogue in
// the line) and, for a file, its 1-based line number. The dialogue of a
// file's line is its record as written: history = every message
// ({role, text} → {role, content}), question = the question, and with
// "memories": "ptkb" the record's meta.ptkb statements as memories, in the
// numeric order of their ids. Candidates are capped at vectorCap, above the
// default max_candidates (64); the ranking does not depend on the cap, so a
// smaller cap is a prefix.
//
// Regenerate (needs ../shared): go test ./trainer -run TestCandidateVectors -update-candidates
var updateCandidates = flag.Bool("update-candidates", false, "rewrite testdata/candidates.jsonl from this build's candidate ranking")

const candidateVectorFile = "../testdata/candidates.jsonl" // trainer/testdata: the Python tests read it too

// vectorCap bounds each line's list (the file stays near 1 MB).
const vectorCap = 96

type candidateVector struct {
	Source     string            `json:"source"`
	Line       int               `json:"line,omitempty"`
	Memories   string            `json:"memories,omitempty"`
	Dialogue   *trainer.Dialogue `json:"dialogue,omitempty"`
	Candidates []string          `json:"candidates"`
}

// vectorSources are the files whose every turn is in the vector file.
var vectorSources = []struct{ source, memories string }{
	{"datasets/demo/train.jsonl", ""},
	{"datasets/demo/eval.jsonl", ""},
	{"shared:conversations/cast2020.jsonl", ""},
	{"shared:conversations/cast2021.jsonl", ""},
	{"shared:conversations/cast2022.jsonl", ""},
	{"shared:conversations/mtrag_human_eval_subset.jsonl", ""},
	{"shared:conversations/ikat2023_train_memory.jsonl", "ptkb"},
}

// inlineDialogues are the cases real data rarely shows: Unicode case
// mapping and digits, one-letter runs, stopwords, question words, system
// messages, memory terms the history has or lacks.
func inlineDialogues() []trainer.Dialogue {
	return []trainer.Dialogue{
		{Question: "what about it?"},
		{History: []trainer.Message{{Role: "user", Content: "Tell me about İstanbul and ΟΔΟΣ Σ in 2,000-mile trips; it's Straße time"},
			{Role: "assistant", Content: "Ünïcode 東京 x y é 3 42 İİ â ǅemal"}}, Question: "Why İSTANBUL?"},
		{History: []trainer.Message{{Role: "system", Content: "system words count too"}, {Role: "user", Content: "Bronze Age collapse"},
			{Role: "assistant", Content: "The Bronze Age collapse: Sea Peoples, drought, earthquakes."}, {Role: "user", Content: "what about the drought?"},
			{Role: "assistant", Content: "Drought in Anatolia and the Levant"}}, Question: "and the sea peoples?"},
		{History: []trainer.Message{{Role: "user", Content: "I want vegan recipes"}, {Role: "assistant", Content: "Try lentil curry."}}, Question: "something spicy?",
			Memories: []trainer.DialogueMemory{{ID: "1", Text: "I'm allergic to peanuts and lentil dust.", Score: 0.9},
				{ID: "q:c#1", Text: "Which Thai curry is vegan?", Score: 0.4}}},
		{History: []trainer.Message{{Role: "assistant", Content: "Only an assistant message, with Words and WORDS."}}, Question: "",
			Memories: []trainer.DialogueMemory{{ID: "m", Text: "words memory-only zebra", Score: 1}}},
	}
}

// candidateTerms is the ranked candidate list of d, capped at vectorCap.
func candidateTerms(d trainer.Dialogue) []string {
	cands, _ := candidates(contextOf(trainer.Prompt{Dialogue: &d}), nil, vectorCap)
	out := make([]string, len(cands))
	for i, c := range cands {
		out[i] = c.term
	}
	return out
}

// vectorRecord is the part of a conversation record the vectors read.
type vectorRecord struct {
	History []struct {
		Role string `json:"role"`
		Text string `json:"text"`
	} `json:"history"`
	Question string `json:"question"`
	Meta     struct {
		PTKB map[string]string `json:"ptkb"`
	} `json:"meta"`
}

// vectorDialogues reads the dialogue of every line of a source file.
func vectorDialogues(path, memories string) ([]trainer.Dialogue, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []trainer.Dialogue
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			return nil, fmt.Errorf("%s:%d: empty line", path, line)
		}
		var rec vectorRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		d := trainer.Dialogue{Question: rec.Question, History: []trainer.Message{}}
		for _, m := range rec.History {
			d.History = append(d.History, trainer.Message{Role: m.Role, Content: m.Text})
		}
		if memories == "ptkb" {
			ids := make([]string, 0, len(rec.Meta.PTKB))
			for id := range rec.Meta.PTKB {
				ids = append(ids, id)
			}
			sort.Slice(ids, func(i, j int) bool { return numericLess(ids[i], ids[j]) })
			for _, id := range ids {
				d.Memories = append(d.Memories, trainer.DialogueMemory{ID: id, Text: rec.Meta.PTKB[id], Score: 1})
			}
		}
		out = append(out, d)
	}
	return out, sc.Err()
}

// numericLess orders ids as numbers when both are, else as strings.
func numericLess(a, b string) bool {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if errA == nil && errB == nil {
		return x < y
	}
	return a < b
}

func sourcePath(tb testing.TB, source string) string {
	if rel, ok := strings.CutPrefix(source, "shared:"); ok {
		return sharedtest.Shared(tb, rel)
	}
	return filepath.Join(sharedtest.RepoRoot(tb), filepath.FromSlash(source))
}

func buildCandidateVectors(tb testing.TB) []candidateVector {
	var out []candidateVector
	for _, d := range inlineDialogues() {
		out = append(out, candidateVector{Source: "inline", Dialogue: &d, Candidates: candidateTerms(d)})
	}
	for _, s := range vectorSources {
		ds, err := vectorDialogues(sourcePath(tb, s.source), s.memories)
		if err != nil {
			tb.Fatal(err)
		}
		for k, d := range ds {
			out = append(out, candidateVector{Source: s.source, Line: k + 1, Memories: s.memories, Candidates: candidateTerms(d)})
		}
	}
	return out
}

func readCandidateVectors(tb testing.TB) []candidateVector {
	raw, err := os.ReadFile(candidateVectorFile)
	if err != nil {
		tb.Fatalf("%v (generate it: go test ./trainer -run TestCandidateVectors -update-candidates)", err)
	}
	var out []candidateVector
	for k, line := range bytes.Split(bytes.TrimRight(raw, "\n"), []byte("\n")) {
		var v candidateVector
		if err := json.Unmarshal(line, &v); err != nil {
			tb.Fatalf("%s:%d: %v", candidateVectorFile, k+1, err)
		}
		if v.Candidates == nil {
			tb.Fatalf("%s:%d: no candidates field", candidateVectorFile, k+1)
		}
		out = append(out, v)
	}
	return out
}

// TestCandidateVectors checks the committed vector file against what this
// build computes: a change to the candidate rule shows up here, and the file
// must then be regenerated (and the Python side follow).
func TestCandidateVectors(t *testing.T) {
	if *updateCandidates {
		vs := buildCandidateVectors(t)
		err := atomicfile.Write(candidateVectorFile, 0o644, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetEscapeHTML(false)
			for _, v := range vs {
				if err := enc.Encode(v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d vectors to %s", len(vs), candidateVectorFile)
		return
	}
	got := readCandidateVectors(t)
	bySource := map[string][]candidateVector{}
	for _, v := range got {
		bySource[v.Source] = append(bySource[v.Source], v)
	}
	t.Run("inline", func(t *testing.T) {
		want := inlineDialogues()
		if len(bySource["inline"]) != len(want) {
			t.Fatalf("%d inline vectors in the file, want %d", len(bySource["inline"]), len(want))
		}
		for k, v := range bySource["inline"] {
			if !slices.Equal(v.Candidates, candidateTerms(*v.Dialogue)) {
				t.Errorf("inline %d: file %q, computed %q", k, v.Candidates, candidateTerms(*v.Dialogue))
			}
		}
	})
	for _, s := range vectorSources {
		t.Run(s.source, func(t *testing.T) {
			ds, err := vectorDialogues(sourcePath(t, s.source), s.memories)
			if err != nil {
				t.Fatal(err)
			}
			vs := bySource[s.source]
			if len(vs) != len(ds) {
				t.Fatalf("%d vectors in the file, the source has %d turns", len(vs), len(ds))
			}
			for k, v := range vs {
				if v.Line != k+1 || v.Memories != s.memories {
					t.Fatalf("vector %d: line %d memories %q, want line %d memories %q", k, v.Line, v.Memories, k+1, s.memories)
				}
				if want := candidateTerms(ds[k]); !slices.Equal(v.Candidates, want) {
					t.Errorf("line %d: file %q, computed %q", v.Line, v.Candidates, want)
				}
			}
		})
	}
}

// TestCandidateVectorsCoverMemories guards the file's reach: memory-only
// candidates and capped lists must both occur, or the parity it proves is
// partial.
func TestCandidateVectorsCoverMemories(t *testing.T) {
	vs := readCandidateVectors(t)
	memOnly, long := 0, 0
	for _, v := range vs {
		if v.Memories != "" || (v.Dialogue != nil && len(v.Dialogue.Memories) > 0) {
			memOnly++
		}
		if len(v.Candidates) > 64 {
			long++
		}
	}
	if memOnly == 0 || long == 0 {
		t.Fatalf("vector file: %d lines with memories, %d with more than 64 candidates; want both > 0", memOnly, long)
	}
}
