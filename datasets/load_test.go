package datasets

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// Record and conversation counts per file, as documented in
// ../shared/data/README.md; passage and relevance counts computed
// independently with Python's json module over the same files.
var sharedFiles = []struct {
	file             string
	turns, convs     int
	withRewrite      int
	withPassages     int
	nullQuestion     int
	passages         int
	judged           int // passages with a relevance
	relevanceAtLeast map[int]int
}{
	{"cast2020.jsonl", 216, 25, 216, 216, 0, 1201, 985, map[int]int{0: 985, 1: 976, 4: 333}},
	{"cast2021.jsonl", 239, 26, 239, 239, 0, 239, 0, nil},
	{"cast2022.jsonl", 284, 50, 284, 220, 0, 1100, 1100, map[int]int{1: 1100, 2: 1092, 4: 589}},
	{"mtrag_human_eval_subset.jsonl", 159, 20, 150, 150, 0, 395, 0, nil},
	{"mtragun_reference.jsonl", 507, 507, 0, 377, 0, 1180, 0, nil},
	{"qrecc_scai_sample.jsonl", 95, 32, 95, -1, 95, 348, 0, nil},
	{"canard_dev.jsonl", 3430, 490, 3430, 0, 0, 0, 0, nil},
	{"canard_train_rewrites_only.jsonl", 31526, 4383, 31526, 0, 0, 0, 0, nil},
}

func TestLoadSharedFilesCounts(t *testing.T) {
	data := sharedtest.SharedDir(t)
	for _, f := range sharedFiles {
		t.Run(f.file, func(t *testing.T) {
			if testing.Short() && f.turns > 10000 {
				t.Skipf("long (skipped by -short): %s has %d turns (over 10,000)", f.file, f.turns)
			}
			turns, stats, err := LoadContext(t.Context(), filepath.Join(data, "conversations", f.file), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(turns) != f.turns || stats.Records != f.turns || stats.Skipped != 0 {
				t.Fatalf("got %d turns (stats %+v), want %d", len(turns), stats, f.turns)
			}
			convs := map[string]bool{}
			var rw, withP, nullQ, ps, judged int
			atLeast := map[int]int{}
			for _, tr := range turns {
				convs[tr.ConvID] = true
				if tr.HasRewrite() {
					rw++
				}
				if len(tr.Passages) > 0 {
					withP++
				}
				if tr.Question == "" {
					nullQ++
				}
				for _, p := range tr.Passages {
					ps++
					if p.Relevance != nil {
						judged++
						for k := range f.relevanceAtLeast {
							if *p.Relevance >= k {
								atLeast[k]++
							}
						}
					}
				}
			}
			if len(convs) != f.convs {
				t.Errorf("%d conversations, want %d", len(convs), f.convs)
			}
			if rw != f.withRewrite {
				t.Errorf("%d turns with a rewrite, want %d", rw, f.withRewrite)
			}
			if f.withPassages >= 0 && withP != f.withPassages {
				t.Errorf("%d turns with passages, want %d", withP, f.withPassages)
			}
			if nullQ != f.nullQuestion {
				t.Errorf("%d turns without a question, want %d", nullQ, f.nullQuestion)
			}
			if ps != f.passages || judged != f.judged {
				t.Errorf("%d passages (%d judged), want %d (%d)", ps, judged, f.passages, f.judged)
			}
			for k, want := range f.relevanceAtLeast {
				if atLeast[k] != want {
					t.Errorf("%d passages with relevance ≥ %d, want %d", atLeast[k], k, want)
				}
			}
		})
	}
}

// Spot checks of field mapping against values read off the files by hand.
func TestLoadFieldValues(t *testing.T) {
	data := sharedtest.SharedDir(t)
	c20, _, err := LoadContext(t.Context(), filepath.Join(data, "conversations", "cast2020.jsonl"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := c20[0]
	if first.ConvID != "cast20-81" || first.Turn != 1 || len(first.History) != 0 ||
		first.Question != "How do you know when your garage door opener is going bad?" ||
		first.Passages[0].ID != "MARCO_5498474" || first.Passages[0].Relevance != nil ||
		first.Passages[0].Source != "canonical response passage" {
		t.Errorf("cast2020 line 1 decoded as %+v", first)
	}
	snip := first.Passages[1]
	if len(snip.AnswerSnippetSets) != 3 || len(snip.AnswerSnippets) != 2 ||
		!strings.HasPrefix(snip.AnswerSnippets[0], "If your garage door opener does not have a safety reversing feature") {
		t.Errorf("cast2020 line 1 passage 1 snippets: sets %d, flat %q", len(snip.AnswerSnippetSets), snip.AnswerSnippets)
	}
	if got := first.Meta["canonical_result_id"]; got != "MARCO_5498474" {
		t.Errorf("meta.canonical_result_id = %v", got)
	}

	// CAsT 2022 numbers turns "1-1", "1-3", …; the label is kept and Turn is
	// the position in the conversation.
	c22, _, err := LoadContext(t.Context(), filepath.Join(data, "conversations", "cast2022.jsonl"), LoadOptions{UserField: "topic"})
	if err != nil {
		t.Fatal(err)
	}
	if c22[1].ConvID != "cast22-132-path1" || c22[1].TurnLabel != "1-3" || c22[1].Turn != 2 || c22[1].User != "132" {
		t.Errorf("cast2022 line 2: conv %s label %q turn %d user %q", c22[1].ConvID, c22[1].TurnLabel, c22[1].Turn, c22[1].User)
	}
	if c22[6].ConvID != "cast22-132-path2" || c22[6].TurnLabel != "2-1" || c22[6].Turn != 3 {
		t.Errorf("cast2022 line 7: conv %s label %q turn %d", c22[6].ConvID, c22[6].TurnLabel, c22[6].Turn)
	}
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodLine = `{"conv_id": "c1", "turn": 1, "history": [], "question": "Who wrote Dune?", "rewrite": null, "answer": "Frank Herbert", "passages": [{"id": "p1"}]}`

func TestLoadMalformedLines(t *testing.T) {
	cases := []struct {
		name, line, field, msg string
	}{
		{"invalid JSON", `{"conv_id": "c2", "turn": 1,`, "", "invalid JSON"},
		{"not an object", `[1, 2]`, "", "want a JSON object"},
		{"turn type", `{"conv_id": "c2", "turn": true, "question": "q"}`, "turn", "want an integer or a string label"},
		{"turn zero", `{"conv_id": "c2", "turn": 0, "question": "q"}`, "turn", "must be ≥ 1"},
		{"missing conv", `{"turn": 1, "question": "q"}`, "conv_id", "is missing"},
		{"missing question key", `{"conv_id": "c2", "turn": 1, "rewrite": "r"}`, "question", "is missing"},
		{"no question nor rewrite", `{"conv_id": "c2", "turn": 1, "question": null, "rewrite": null}`, "question", "no rewrite either"},
		{"bad role", `{"conv_id": "c2", "turn": 2, "question": "q", "history": [{"role": "user", "text": "a"}, {"role": "bot", "text": "b"}]}`, "history[1].role", `got "bot"`},
		{"passage id", `{"conv_id": "c2", "turn": 1, "question": "q", "passages": [{"id": "p"}, {"id": "p2"}, {"title": "t"}]}`, "passages[2].id", "is missing"},
		{"relevance type", `{"conv_id": "c2", "turn": 1, "question": "q", "passages": [{"id": "p", "relevance": "high"}]}`, "passages[0].relevance", "want an integer"},
		{"unknown field", `{"conv_id": "c2", "turn": 1, "question": "q", "rewirte": "typo"}`, "rewirte", "unknown field"},
		{"answer type", `{"conv_id": "c2", "turn": 1, "question": "q", "answer": 42}`, "answer", "want a string"},
		{"meta type", `{"conv_id": "c2", "turn": 1, "question": "q", "meta": [1]}`, "meta", "want an object"},
		{"duplicate", `{"conv_id": "c1", "turn": 1, "question": "again"}`, "turn", "duplicate turn c1#1 (first at line 1)"},
		{"duplicate by label", `{"conv_id": "c1", "turn": "two", "question": "again"}`, "turn",
			`duplicate turn c1#1 (first at line 1); its "turn" is the label "two", so its number is counted from its history: 0 earlier user turns`},
		// encoding/json would replace invalid bytes by U+FFFD without a word.
		{"invalid UTF-8 question", "{\"conv_id\": \"c2\", \"turn\": 1, \"question\": \"caf\xe9?\"}", "question", "invalid UTF-8"},
		{"invalid UTF-8 history", "{\"conv_id\": \"c2\", \"turn\": 2, \"question\": \"q\", \"history\": [{\"role\": \"user\", \"text\": \"a\"}, {\"role\": \"assistant\", \"text\": \"\xff\xfe\"}]}", "history[1].text", "invalid UTF-8"},
		{"invalid UTF-8 passage", "{\"conv_id\": \"c2\", \"turn\": 1, \"question\": \"q\", \"passages\": [{\"id\": \"p\", \"text\": \"\xc3\"}]}", "passages[0].text", "invalid UTF-8"},
		{"invalid UTF-8 meta", "{\"conv_id\": \"c2\", \"turn\": 1, \"question\": \"q\", \"meta\": {\"topic\": \"\x80\"}}", "meta.topic", "invalid UTF-8"},
		{"field too long", `{"conv_id": "c2", "turn": 1, "question": "` + strings.Repeat("a", DefaultMaxFieldBytes+1) + `"}`, "question",
			"is 262145 bytes, more than the 262144 allowed (data.max_field_bytes)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The bad record is on line 3, after a good line and a blank one.
			content := goodLine + "\n\n" + c.line + "\n" + strings.Replace(goodLine, `"c1"`, `"c9"`, 1) + "\n"
			path := writeTemp(t, "data.jsonl", content)
			_, _, err := LoadContext(t.Context(), path, LoadOptions{})
			var re *RecordError
			if !errors.As(err, &re) {
				t.Fatalf("want a *RecordError, got %v", err)
			}
			if re.File != path || re.Line != 3 || re.Field != c.field || !strings.Contains(re.Err.Error(), c.msg) {
				t.Fatalf("got %s (line %d, field %q), want line 3, field %q, message containing %q", err, re.Line, re.Field, c.field, c.msg)
			}
			if !strings.HasPrefix(err.Error(), path+":3: ") {
				t.Errorf("message %q does not start with file:line", err)
			}

			turns, stats, err := LoadContext(t.Context(), path, LoadOptions{SkipBad: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(turns) != 2 || stats.Records != 2 || stats.Skipped != 1 || len(stats.SkippedErrors) != 1 {
				t.Fatalf("SkipBad: %d turns, stats %+v; want 2 kept, 1 skipped", len(turns), stats)
			}
			if turns[0].ConvID != "c1" || turns[1].ConvID != "c9" {
				t.Errorf("SkipBad kept %s and %s", turns[0].ID(), turns[1].ID())
			}
		})
	}
}

func TestLoadUserField(t *testing.T) {
	content := `{"conv_id": "a", "turn": 1, "question": "q1", "meta": {"topic": 12, "customer": "u-7"}}
{"conv_id": "b", "turn": 1, "question": "q2", "meta": {"topic": "x", "customer": "u-7"}}
`
	path := writeTemp(t, "u.jsonl", content)
	for field, want := range map[string][2]string{
		"":              {"a", "b"},
		"conv_id":       {"a", "b"},
		"topic":         {"12", "x"},
		"meta.customer": {"u-7", "u-7"},
	} {
		turns, _, err := LoadContext(t.Context(), path, LoadOptions{UserField: field})
		if err != nil {
			t.Fatalf("user field %q: %v", field, err)
		}
		if turns[0].User != want[0] || turns[1].User != want[1] {
			t.Errorf("user field %q: got %q, %q; want %q", field, turns[0].User, turns[1].User, want)
		}
	}
	_, _, err := LoadContext(t.Context(), path, LoadOptions{UserField: "meta.region"})
	var re *RecordError
	if !errors.As(err, &re) || re.Line != 1 || re.Field != "meta.region" || !strings.Contains(err.Error(), "data.user_field is meta.region") {
		t.Errorf("missing user field: got %v", err)
	}
	if _, _, err := LoadContext(t.Context(), path, LoadOptions{UserField: "speaker"}); err == nil || !strings.Contains(err.Error(), "want conv_id, topic or meta.<key>") {
		t.Errorf("bad user field: got %v", err)
	}
}

func TestLoadQReCC(t *testing.T) {
	turns, stats, err := LoadContext(t.Context(), filepath.Join("testdata", "qrecc_small.json"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Records != 3 || len(turns) != 3 {
		t.Fatalf("got %d turns, want 3", len(turns))
	}
	second := turns[1]
	wantRewrite := "What are the educational requirements of a physician's assistant?"
	if second.ConvID != "1" || second.Turn != 2 || second.Question != "What are their educational requirements?" ||
		second.Rewrite == nil || *second.Rewrite != wantRewrite || second.Answer != "A master's degree from an accredited program." {
		t.Errorf("record 1 decoded as %+v", second)
	}
	wantHist := []Message{
		{"user", "What is a physician's assistant?"},
		{"assistant", "A physician assistant is a medical provider licensed to diagnose and treat illness."},
	}
	if !reflect.DeepEqual(second.History, wantHist) {
		t.Errorf("history = %+v", second.History)
	}
	if second.Meta["answer_url"] != "https://example.org/pa-education" || second.Meta["conversation_source"] != "trec" || second.Meta["dataset"] != "QReCC" {
		t.Errorf("meta = %v", second.Meta)
	}
	if turns[2].Rewrite != nil {
		t.Errorf("empty Rewrite should be no rewrite, got %q", *turns[2].Rewrite)
	}
}

func TestLoadQReCCErrors(t *testing.T) {
	path := filepath.Join("testdata", "qrecc_bad.json")
	_, _, err := LoadContext(t.Context(), path, LoadOptions{})
	var re *RecordError
	if !errors.As(err, &re) {
		t.Fatalf("want a *RecordError, got %v", err)
	}
	// Record 1 starts on line 3 of the fixture.
	if re.Record != 1 || re.Line != 3 || re.Field != "Turn_no" {
		t.Fatalf("got %v (record %d, line %d, field %q)", err, re.Record, re.Line, re.Field)
	}
	turns, stats, err := LoadContext(t.Context(), path, LoadOptions{SkipBad: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 2 || stats.Skipped != 2 {
		t.Fatalf("SkipBad: %d turns, %d skipped; want 2 and 2", len(turns), stats.Skipped)
	}
	if !errors.As(stats.SkippedErrors[1], &re) || re.Record != 2 || re.Line != 5 || re.Field != "Context" {
		t.Errorf("second skipped error: %v", stats.SkippedErrors[1])
	}
}

func TestLoadTopiOCQA(t *testing.T) {
	turns, _, err := LoadContext(t.Context(), filepath.Join("testdata", "topiocqa_small.json"), LoadOptions{UserField: "topic"})
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 2 {
		t.Fatalf("got %d turns", len(turns))
	}
	tr := turns[1]
	if tr.ConvID != "7" || tr.Turn != 2 || tr.User != "Canberra" || tr.Rewrite == nil || *tr.Rewrite != "when was Canberra founded" {
		t.Errorf("record 1 decoded as %+v", tr)
	}
	if len(tr.Passages) != 1 || tr.Passages[0].ID != "wiki:5498210" || tr.Passages[0].Title != "Canberra" {
		t.Errorf("gold passage = %+v", tr.Passages)
	}
	if tr.Meta["topic_section"] != "History" || tr.Meta["is_nq"] != false || tr.Meta["dataset"] != "TopiOCQA" {
		t.Errorf("meta = %v", tr.Meta)
	}
	if turns[0].Rewrite != nil {
		t.Errorf("turn without Rewrite got %q", *turns[0].Rewrite)
	}
}

func TestDetectFormat(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]struct{ name, content, want string }{
		"jsonl ext":     {"a.jsonl", goodLine, FormatJSONL},
		"json object":   {"a.json", goodLine, FormatJSONL},
		"qrecc":         {"b.json", `[{"Conversation_no": 1}]`, FormatQReCC},
		"topiocqa":      {"c.json", `[{"Conversation_no": 1, "Gold_passage": {}}]`, FormatTopiOCQA},
		"parquet magic": {"d.bin", "PAR1....", FormatParquet},
	}
	for name, c := range cases {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := detectFormat(p)
		if err != nil || got != c.want {
			t.Errorf("%s: got %q, %v; want %q", name, got, err, c.want)
		}
	}
	p := filepath.Join(dir, "e.json")
	os.WriteFile(p, []byte(`[{"x": 1}]`), 0o644)
	if _, err := detectFormat(p); err == nil {
		t.Error("an unrelated JSON array should not be accepted")
	}
}

func TestLoadFilesRejectsSharedTurnIDs(t *testing.T) {
	a := writeTemp(t, "a.jsonl", goodLine+"\n")
	b := writeTemp(t, "b.jsonl", strings.Replace(goodLine, `"c1"`, `"c2"`, 1)+"\n")
	turns, st, err := LoadFiles(context.Background(), []string{a, b}, LoadOptions{})
	if err != nil || len(turns) != 2 || st.Records != 2 || turns[1].ConvID != "c2" {
		t.Fatalf("two files: %d turns, %+v, %v", len(turns), st, err)
	}
	aCopy := writeTemp(t, "a-copy.jsonl", goodLine+"\n")
	if _, _, err := LoadFiles(context.Background(), []string{a, b, aCopy}, LoadOptions{}); err == nil || !strings.Contains(err.Error(), "c1#1 is in both") {
		t.Errorf("shared id: %v", err)
	}
	if _, _, err := LoadFiles(context.Background(), []string{a, b, a}, LoadOptions{}); err == nil || !strings.Contains(err.Error(), a+" given twice") {
		t.Errorf("a file twice: %v", err)
	}
}

// A line longer than MaxRecordBytes is refused without being held whole, and
// reading goes on at the next line (line numbers stay right).
func TestLoadRecordTooLong(t *testing.T) {
	long := `{"conv_id": "c2", "turn": 1, "question": "` + strings.Repeat("x", 5000) + `"}`
	path := writeTemp(t, "data.jsonl", goodLine+"\n"+long+"\n"+strings.Replace(goodLine, `"c1"`, `"c9"`, 1)+"\n")
	opts := LoadOptions{MaxRecordBytes: 1000, MaxFieldBytes: 1000}
	_, _, err := LoadContext(t.Context(), path, opts)
	var re *RecordError
	if !errors.As(err, &re) || re.Line != 2 || !errors.Is(err, ErrTooLong) ||
		!strings.Contains(err.Error(), path+":2: record is 5045 bytes, more than the 1000 allowed (data.max_record_bytes)") {
		t.Fatalf("got %v", err)
	}
	opts.SkipBad = true
	turns, st, err := LoadContext(t.Context(), path, opts)
	if err != nil || len(turns) != 2 || st.Skipped != 1 || turns[1].ConvID != "c9" {
		t.Fatalf("SkipBad: %v, %d turns, %+v", err, len(turns), st)
	}
	// The per-field bound is configurable too.
	_, _, err = LoadContext(t.Context(), path, LoadOptions{MaxFieldBytes: 10})
	if !errors.As(err, &re) || re.Line != 1 || re.Field != "question" || !strings.Contains(err.Error(), "more than the 10 allowed") {
		t.Fatalf("field bound 10: %v", err)
	}
}

// Parquet strings and the original QReCC array are checked the same way.
func TestLoadInvalidUTF8OtherFormats(t *testing.T) {
	dir := t.TempDir()
	pq := filepath.Join(dir, "d.parquet")
	bad := "ok \xff"
	if err := WriteParquetContext(t.Context(), pq, []Turn{{ConvID: "c1", Turn: 1, Question: "q"}, {ConvID: "c2", Turn: 1, Question: "q", Rewrite: &bad}}); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadContext(t.Context(), pq, LoadOptions{})
	var re *RecordError
	if !errors.As(err, &re) || re.Record != 1 || re.Field != "rewrite" || !strings.Contains(err.Error(), "invalid UTF-8") {
		t.Errorf("parquet: %v", err)
	}
	qr := writeTemp(t, "qrecc.json", "[{\"Conversation_no\": 1, \"Turn_no\": 1, \"Context\": [], \"Question\": \"bad \xe2\x82\", \"Rewrite\": \"r\", \"Answer\": \"a\"}]")
	_, _, err = LoadContext(t.Context(), qr, LoadOptions{})
	if !errors.As(err, &re) || re.Record != 0 || re.Field != "Question" || !strings.Contains(err.Error(), "invalid UTF-8") {
		t.Errorf("qrecc: %v", err)
	}
}

// TestLoadStopsOnACancelledContext: a cancelled context stops a load in any
// format, however small the file, with an error that wraps context.Canceled.
func TestLoadStopsOnACancelledContext(t *testing.T) {
	dir := t.TempDir()
	turns := []Turn{{ConvID: "c1", Turn: 1, Question: "q1", Answer: "a"}, {ConvID: "c1", Turn: 2, Question: "q2", Answer: "b"}}
	jsonl, pq := filepath.Join(dir, "t.jsonl"), filepath.Join(dir, "t.parquet")
	if err := WriteJSONLContext(t.Context(), jsonl, turns); err != nil {
		t.Fatal(err)
	}
	if err := WriteParquetContext(t.Context(), pq, turns); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, path := range []string{jsonl, pq, filepath.Join("testdata", "qrecc_small.json")} {
		got, _, err := LoadContext(ctx, path, LoadOptions{})
		if !errors.Is(err, context.Canceled) || got != nil {
			t.Errorf("%s: %d turns, err %v; want none and context.Canceled", path, len(got), err)
		}
		if err != nil && !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %q does not name the file", path, err)
		}
	}
	if err := WriteJSONLContext(ctx, filepath.Join(dir, "u.jsonl"), turns); !errors.Is(err, context.Canceled) {
		t.Errorf("write with a cancelled context: %v, want context.Canceled", err)
	}
}

// Item 6 of issue 33: a record with "question": null and a rewrite loaded,
// and a run stopped at the step that drew it, naming no file or line. With
// RequireQuestion (training and evaluation data) it is refused at load,
// naming file, line and field; without it (himes prep) it still loads.
func TestLoadRequireQuestion(t *testing.T) {
	p := filepath.Join(t.TempDir(), "train.jsonl")
	body := `{"conv_id":"c","turn":1,"question":"who wrote hamlet","answer":"shakespeare"}` + "\n" +
		`{"conv_id":"c","turn":2,"question":null,"rewrite":"when was hamlet written","answer":"1600"}` + "\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if turns, _, err := LoadContext(t.Context(), p, LoadOptions{}); err != nil || len(turns) != 2 {
		t.Fatalf("without RequireQuestion: %d turns, %v; want both", len(turns), err)
	}
	_, _, err := LoadContext(t.Context(), p, LoadOptions{RequireQuestion: true})
	if err == nil || !strings.Contains(err.Error(), p+`:2: field "question": is null or blank`) {
		t.Fatalf("got %v, want an error naming %s:2 and field question", err, p)
	}
	turns, st, err := LoadContext(t.Context(), p, LoadOptions{RequireQuestion: true, SkipBad: true})
	if err != nil || len(turns) != 1 || st.Skipped != 1 {
		t.Fatalf("SkipBad: %d turns, %+v, %v; want 1 kept and 1 skipped", len(turns), st, err)
	}
}
