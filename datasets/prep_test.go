package datasets

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

func sp(s string) *string { return &s }

func testRenderer(t *testing.T) *Renderer {
	t.Helper()
	r, err := NewRenderer(DefaultPromptConfig())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sftFixture exercises every reason to keep or drop, with counts worked out
// by hand in TestBuildSFTCounts.
func sftFixture() []Turn {
	dupHist := []Message{{"user", "What is BM25?"}, {"assistant", "A ranking function."}}
	return []Turn{
		{ConvID: "c1", Turn: 1, Question: "Who wrote Dune?", Rewrite: sp("who wrote dune")},                                                                      // identity (natural)
		{ConvID: "c1", Turn: 2, Question: "When was it published?", Rewrite: sp("When was Dune published?"), History: hist("Who wrote Dune?", "Frank Herbert.")}, // rewrite
		{ConvID: "c1", Turn: 3, Question: "  ", Rewrite: sp("x")},                                                                                                // no_question
		{ConvID: "c2", Turn: 1, Question: "What is BM25?"},                                                                                                       // no_rewrite
		{ConvID: "c2", Turn: 2, Question: "Is it fast?", Rewrite: sp("Is BM25 fast?"), History: dupHist},                                                         // rewrite
		{ConvID: "c3", Turn: 2, Question: "Is it fast?", Rewrite: sp("Is BM25 fast?"), History: dupHist},                                                         // duplicate
		{ConvID: "c4", Turn: 1, Question: "x", Rewrite: sp("   ")},                                                                                               // empty_pair
		{ConvID: "c5", Turn: 1, Question: "y", Rewrite: sp(strings.Repeat("long ", 100))},                                                                        // completion_too_long
		{ConvID: "c6", Turn: 1, Question: strings.Repeat("huge ", 2000), Rewrite: sp("z")},                                                                       // prompt_too_long
	}
}

func TestBuildSFTCounts(t *testing.T) {
	cfg := DefaultPrepConfig()
	cfg.ValFraction = 0
	cfg.NoRewriteRatio = 0.5 // 2 rewrite examples → 2 identity: 1 natural + 1 synthetic
	train, val, st, err := BuildSFT(context.Background(), sftFixture(), testRenderer(t), cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(val) != 0 {
		t.Fatalf("val fraction 0 gave %d validation examples", len(val))
	}
	wantDropped := map[string]int{DropNoQuestion: 1, DropNoRewrite: 1, DropDuplicate: 1, DropEmptyPair: 1, DropCompletionLong: 1, DropPromptLong: 1}
	wantKinds := map[string]int{KindRewrite: 2, KindNoRewrite: 1, KindNoRewriteSynthetic: 1}
	if !reflect.DeepEqual(st.Dropped, wantDropped) || !reflect.DeepEqual(st.Kinds, wantKinds) || st.Train != 4 || st.Input != 9 {
		t.Fatalf("stats %+v; want dropped %v kinds %v", st, wantDropped, wantKinds)
	}
	byID := map[string]SFTExample{}
	for _, e := range train {
		byID[e.ID] = e
	}
	if e := byID["c1#1"]; e.Kind != KindNoRewrite || e.Completion != "Who wrote Dune?" {
		t.Errorf("natural identity example: %+v", e)
	}
	if e := byID["c1#2"]; e.Kind != KindRewrite || e.Completion != "When was Dune published?" ||
		!strings.Contains(e.Prompt, "Question: When was it published?") || !strings.Contains(e.Prompt, "User: Who wrote Dune?") {
		t.Errorf("rewrite example: %+v", e)
	}
	var synth *SFTExample
	for i := range train {
		if train[i].Kind == KindNoRewriteSynthetic {
			synth = &train[i]
		}
	}
	if synth == nil || !strings.HasSuffix(synth.ID, "/self") || !strings.Contains(synth.Prompt, "Question: "+synth.Completion+"\n") {
		t.Errorf("synthetic identity example: %+v", synth)
	}
	// Examples come in input order, a synthetic one right after its turn's.
	var ids []string
	for _, e := range train {
		ids = append(ids, e.ID)
	}
	if ids[0] != "c1#1" || ids[1] != "c1#2" {
		t.Errorf("order %v", ids)
	}
	// Messages: system, user (the chat prompt), assistant (the completion).
	m := byID["c1#2"].Messages
	if len(m) != 3 || m[0].Role != "system" || m[1].Role != "user" || m[1].Text != byID["c1#2"].UserPrompt || m[2] != (Message{"assistant", "When was Dune published?"}) {
		t.Errorf("messages %+v", m)
	}

	if st.NoRewriteShortfall != 0 {
		t.Errorf("shortfall %d, want 0", st.NoRewriteShortfall)
	}
	// Ratio 0.9 wants round(2·0.9/0.1) = 18 identity examples; there are 1
	// natural candidate and 2 kept rewrites to make synthetic ones from, so 3
	// are made and 15 are missing.
	cfg.NoRewriteRatio = 0.9
	_, _, st, _ = BuildSFT(context.Background(), sftFixture(), testRenderer(t), cfg, 1)
	if got := st.Kinds[KindNoRewrite] + st.Kinds[KindNoRewriteSynthetic]; got != 3 || st.NoRewriteShortfall != 15 {
		t.Errorf("ratio 0.9: %d identity examples, shortfall %d; want 3 and 15", got, st.NoRewriteShortfall)
	}

	// Ratio 0: no identity examples; the natural one is counted as dropped.
	cfg.NoRewriteRatio = 0
	train, _, st, _ = BuildSFT(context.Background(), sftFixture(), testRenderer(t), cfg, 1)
	if len(train) != 2 || st.Dropped[DropRatio] != 1 || st.Kinds[KindNoRewrite] != 0 {
		t.Errorf("ratio 0: %d examples, stats %+v", len(train), st)
	}
}

// On real data: splits do not share a conversation, the no-rewrite share is
// the configured one, and the files load as TRL expects them.
func TestPrepSFTSharedData(t *testing.T) {
	data := sharedtest.SharedDir(t)
	var turns []Turn
	for _, f := range []string{"cast2020.jsonl", "cast2021.jsonl", "mtrag_human_eval_subset.jsonl"} {
		ts, _, err := LoadContext(t.Context(), filepath.Join(data, "conversations", f), LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		turns = append(turns, ts...)
	}
	cfg := DefaultPrepConfig()
	train, val, st, err := BuildSFT(context.Background(), turns, testRenderer(t), cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	trainConv := map[string]bool{}
	for _, e := range train {
		trainConv[e.ConvID] = true
	}
	for _, e := range val {
		if trainConv[e.ConvID] {
			t.Fatalf("conversation %s in both splits", e.ConvID)
		}
	}
	if len(val) == 0 || len(train) < 5*len(val) {
		t.Errorf("%d train and %d validation examples for val_fraction 0.1", len(train), len(val))
	}
	// Every usable turn is accounted for: kept or dropped for a reason.
	identity := 0
	for _, e := range train {
		if e.Kind != KindRewrite {
			identity++
		}
	}
	rewrites := len(train) - identity
	if want := float64(rewrites) * cfg.NoRewriteRatio / (1 - cfg.NoRewriteRatio); float64(identity) < want-1 || float64(identity) > want+1 {
		t.Errorf("%d identity examples for %d rewrites, want %.1f (ratio %v)", identity, rewrites, want, cfg.NoRewriteRatio)
	}
	if st.Dropped[DropNoRewrite] != 9 { // MTRAG: 159 turns, 150 with a rewrite
		t.Errorf("no_rewrite dropped %d, want 9", st.Dropped[DropNoRewrite])
	}

	dir := t.TempDir()
	files, err := WriteSFT(context.Background(), dir, train, val)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 10 {
		t.Errorf("wrote %d files: %v", len(files), files)
	}
	// The list prep checks its inputs against holds every file written.
	if listed := SFTOutputs(dir); !sameSet(files, listed) {
		t.Errorf("WriteSFT wrote %v; SFTOutputs lists %v", files, listed)
	}
	rows := readJSONLMaps(t, filepath.Join(dir, LayoutPromptCompletion, "train.jsonl"))
	if len(rows) != len(train) {
		t.Fatalf("%d prompt/completion rows, want %d", len(rows), len(train))
	}
	for i, r := range rows {
		p, _ := r["prompt"].(string)
		c, _ := r["completion"].(string)
		if len(r) != 2 || strings.TrimSpace(p) == "" || strings.TrimSpace(c) == "" {
			t.Fatalf("prompt_completion row %d: %v", i, r)
		}
	}
	for i, r := range readJSONLMaps(t, filepath.Join(dir, LayoutMessages, "validation.jsonl")) {
		msgs, _ := r["messages"].([]any)
		if len(r) != 1 || len(msgs) != 3 {
			t.Fatalf("messages row %d: %v", i, r)
		}
		for j, role := range []string{"system", "user", "assistant"} {
			m := msgs[j].(map[string]any)
			if m["role"] != role || strings.TrimSpace(m["content"].(string)) == "" || len(m) != 2 {
				t.Fatalf("messages row %d message %d: %v", i, j, m)
			}
		}
	}
	// The Parquet files hold the same rows and columns.
	for _, f := range []struct {
		path string
		n    int
		cols []string
	}{
		{filepath.Join(dir, LayoutPromptCompletion, "train.parquet"), len(train), []string{"prompt", "completion"}},
		{filepath.Join(dir, LayoutMessages, "validation.parquet"), len(val), []string{"messages"}},
	} {
		n, cols := parquetShape(t, f.path)
		if n != f.n || !reflect.DeepEqual(cols, f.cols) {
			t.Errorf("%s: %d rows %v, want %d %v", f.path, n, cols, f.n, f.cols)
		}
	}
}

func readJSONLMaps(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, m)
	}
	return out
}

func parquetShape(t *testing.T, path string) (int, []string) {
	t.Helper()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	var cols []string
	for _, f := range tbl.Schema().Fields() {
		cols = append(cols, f.Name)
	}
	return int(tbl.NumRows()), cols
}

func TestBuildRL(t *testing.T) {
	h := hist("a", "b")
	turns := []Turn{
		{ConvID: "c1", Turn: 1, Question: "q1", Answer: "a1", User: "u1", Passages: []PassageRef{{ID: "p1"}}},
		{ConvID: "c1", Turn: 2, Question: "q2", Answer: " ", User: "u1"},     // no_answer
		{ConvID: "c2", Turn: 1, Question: "", Rewrite: sp("r"), Answer: "a"}, // no_question
		{ConvID: "c2", Turn: 2, Question: "q", Answer: "a", History: h, User: "u2"},
		{ConvID: "c3", Turn: 2, Question: "q", Answer: "a", History: h, User: "u3"}, // duplicate of c2#2
		{ConvID: "c3", Turn: 3, Question: "q3", Answer: "a3", History: h, User: "u3"},
	}
	cfg := DefaultPrepConfig()
	cfg.ValFraction = 0
	train, val, st, err := BuildRL(turns, cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{DropNoAnswer: 1, DropNoQuestion: 1, DropDuplicate: 1}
	if len(train) != 3 || len(val) != 0 || !reflect.DeepEqual(st.Dropped, want) {
		t.Fatalf("%d/%d kept, dropped %v; want 3/0 and %v", len(train), len(val), st.Dropped, want)
	}
	if train[0].User != "u1" || !reflect.DeepEqual(train[0].GoldPassageIDs(), []string{"p1"}) {
		t.Errorf("first kept turn %+v", train[0])
	}
	cfg.RequirePassages = true
	train, _, st, _ = BuildRL(turns, cfg, 1)
	if len(train) != 1 || st.Dropped[DropNoPassages] != 3 { // checked before duplicates
		t.Errorf("require_passages: %d kept, dropped %v", len(train), st.Dropped)
	}
}

// CAsT 2022 by topic: the repeated path prefixes collapse (203 distinct
// (history, question, answer) among the 278 answered turns, counted with
// Python), and no topic straddles the splits.
func TestBuildRLCAsT2022(t *testing.T) {
	data := sharedtest.SharedDir(t)
	turns, _, err := LoadContext(t.Context(), filepath.Join(data, "conversations", "cast2022.jsonl"), LoadOptions{UserField: "topic"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultPrepConfig()
	cfg.SplitBy = "topic"
	cfg.ValFraction = 0.2
	train, val, st, err := BuildRL(turns, cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(train)+len(val) != 203 || st.Dropped[DropNoAnswer] != 6 || st.Dropped[DropDuplicate] != 75 {
		t.Errorf("kept %d, dropped %v; want 203 kept, 6 no_answer, 75 duplicate", len(train)+len(val), st.Dropped)
	}
	topics := map[string]bool{}
	for _, tr := range train {
		topics[tr.User] = true
	}
	for _, tr := range val {
		if topics[tr.User] {
			t.Fatalf("topic %s in both splits", tr.User)
		}
	}
	if st.TrainKeys+st.ValKeys != 18 || st.ValKeys != 4 {
		t.Errorf("%d train and %d validation topics, want 14 and 4", st.TrainKeys, st.ValKeys)
	}
	dir := t.TempDir()
	files, err := WriteRL(context.Background(), dir, train, val)
	if err != nil || len(files) != 4 {
		t.Fatalf("wrote %v, %v", files, err)
	}
	if listed := RLOutputs(dir); !sameSet(files, listed) {
		t.Errorf("WriteRL wrote %v; RLOutputs lists %v", files, listed)
	}
	back, _, err := LoadContext(t.Context(), filepath.Join(dir, "validation.parquet"), LoadOptions{UserField: "topic"})
	if err != nil || len(back) != len(val) {
		t.Fatalf("read back %d of %d: %v", len(back), len(val), err)
	}
	if back[0].User != val[0].User || back[0].TurnLabel != val[0].TurnLabel {
		t.Errorf("read back %+v", back[0].ID())
	}

	// split_by topic on a file without topics names the turn.
	c20, _, _ := LoadContext(t.Context(), filepath.Join(data, "conversations", "cast2020.jsonl"), LoadOptions{})
	if _, _, _, err := BuildRL(c20, cfg, 1); err == nil || !strings.Contains(err.Error(), "cast20-81#1") {
		t.Errorf("split_by topic without topics: %v", err)
	}
}

// A split key a turn lacks is reported against data.prep.split_by, the
// setting that asked for it, not against the user field.
func TestSplitKeyMissingNamesSplitBy(t *testing.T) {
	keyOf, err := SplitKeyFunc("meta.region")
	if err != nil {
		t.Fatal(err)
	}
	_, err = keyOf(Turn{ConvID: "c", Turn: 2, Meta: map[string]any{"topic": "x"}})
	if err == nil || !strings.Contains(err.Error(), "data.prep.split_by is meta.region") || strings.Contains(err.Error(), "user") {
		t.Errorf("got %v, want an error naming data.prep.split_by", err)
	}
	if _, err := SplitKeyFunc("speaker"); err == nil || !strings.Contains(err.Error(), "split_by") {
		t.Errorf("bad split key: got %v", err)
	}
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x string) bool { return !slices.Contains(b, x) })
}
