package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runScoreCmd runs the root command with args and stdin, returning stdout,
// stderr and the error.
func runScoreCmd(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.Execute()
	return out.String(), errb.String(), err
}

type scoreOutLine struct {
	Line    int     `json:"line"`
	RougeP  float64 `json:"rougeL_p"`
	RougeR  float64 `json:"rougeL_r"`
	RougeF1 float64 `json:"rougeL_f1"`
	EM      float64 `json:"em"`
	SquadEM float64 `json:"squad_em"`
	SquadF1 float64 `json:"squad_f1"`
	Hit     float64 `json:"hit"`
	Alpha   float64 `json:"alpha"`
	Beta    float64 `json:"beta"`
	Reward  float64 `json:"reward"`
	EMNorm  string  `json:"em_normalization"`
}

func parseScoreLines(t *testing.T, out string) []scoreOutLine {
	t.Helper()
	var res []scoreOutLine
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var s scoreOutLine
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		res = append(res, s)
	}
	return res
}

// TestScoreSQuADIsOfficial: under the default unicode tokenizer "2,000" and
// "2000" are different answers for the reward's EM (tokens "2" "000" vs
// "2000") but the same for SQuAD v1.1 (normalize_answer deletes the comma):
// squad_em 1, squad_f1 1; with rouge-score both agree.
func TestScoreSQuADIsOfficial(t *testing.T) {
	in := `{"prediction": "2,000", "reference": "2000"}` + "\n"
	for _, c := range []struct {
		args []string
		em   float64
		norm string
	}{{nil, 0, "unicode"}, {[]string{"--tokenizer", "rouge-score"}, 1, "squad"}} {
		out, _, err := runScoreCmd(t, in, append([]string{"score"}, c.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		got := parseScoreLines(t, out)
		if len(got) != 1 || got[0].SquadEM != 1 || got[0].SquadF1 != 1 || got[0].EM != c.em || got[0].EMNorm != c.norm {
			t.Fatalf("%v: %+v, want squad_em 1, squad_f1 1, em %v, em_normalization %s", c.args, got, c.em, c.norm)
		}
	}
}

func TestScoreCommand(t *testing.T) {
	in := `{"prediction": "The answer is 42 years", "reference": "42", "context": ["Q: his age? The answer is 42 years."]}

{"prediction": "dogs are running quickly", "reference": "the dog runs quick"}
`
	out, _, err := runScoreCmd(t, in, "score", "--tokenizer", "rouge-score", "--stem", "--alpha", "0.5", "--beta", "2")
	if err != nil {
		t.Fatal(err)
	}
	got := parseScoreLines(t, out)
	if len(got) != 2 {
		t.Fatalf("%d output lines, want 2:\n%s", len(got), out)
	}
	// Line 1: the shared vector "partial_overlap" (P 0.2, R 1, F1
	// 0.33333333333333337, SQuAD F1 0.4), and the normalized answer occurs in the context.
	a := got[0]
	if a.Line != 1 || a.RougeP != 0.2 || a.RougeR != 1 || a.RougeF1 != 0.33333333333333337 || a.EM != 0 ||
		a.SquadF1 != 0.4 || a.Hit != 1 || a.Alpha != 0.5 || a.Beta != 2 || a.Reward != 0.33333333333333337+2 {
		t.Errorf("line 1: %+v", a)
	}
	// Line 3: the shared vector "stemming", with stemming: P = R = F1 = 0.5; no context, no hit.
	b := got[1]
	if b.Line != 3 || b.RougeF1 != 0.5 || b.Hit != 0 || b.Reward != 0.5 {
		t.Errorf("line 3: %+v", b)
	}
}

func TestScoreCommandFileAndHitGold(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(path, []byte(`{"prediction": "London", "reference": "北京", "context": ["首都是北京"]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runScoreCmd(t, "", "score", "--hit", "gold", path)
	if err != nil {
		t.Fatal(err)
	}
	got := parseScoreLines(t, out)
	if len(got) != 1 || got[0].Hit != 1 || got[0].RougeF1 != 0 || got[0].Reward != 1 {
		t.Errorf("gold hit with the unicode tokenizer: %+v", got)
	}
}

func TestScoreCommandMalformed(t *testing.T) {
	in := `{"prediction": "a", "reference": "a"}
{"prediction": "a"
{"prediction": 3, "reference": "a"}
{"reference": "a"}
{"prediction": "b", "reference": "b"}
`
	_, _, err := runScoreCmd(t, in, "score")
	if err == nil || !strings.Contains(err.Error(), "stdin:2:") {
		t.Fatalf("error %v, want one naming line 2", err)
	}
	out, stderr, err := runScoreCmd(t, in, "score", "--skip-bad")
	if err != nil {
		t.Fatal(err)
	}
	got := parseScoreLines(t, out)
	if len(got) != 2 || got[0].Line != 1 || got[1].Line != 5 {
		t.Errorf("skip-bad output %+v", got)
	}
	if !strings.Contains(stderr, "skipped 3 malformed") {
		t.Errorf("stderr %q does not count the 3 skipped lines", stderr)
	}
	for _, c := range []struct{ in, want string }{
		{`{"prediction": 3, "reference": "a"}`, `stdin:1: field "prediction"`},
		{`{"prediction": "x"}`, `stdin:1: field "reference": missing`},
		{`{"prediction": "x", "reference": "y", "context": "z"}`, `stdin:1: field "context"`},
	} {
		if _, _, err := runScoreCmd(t, c.in, "score"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("input %s: error %v, want %q", c.in, err, c.want)
		}
	}
}

// Invalid UTF-8 used to be replaced by U+FFFD and scored; oversized lines
// and fields are refused (a 50 MB input line was read whole), and with
// --skip-bad reading goes on at the next line.
func TestScoreCommandInvalidUTF8AndSizes(t *testing.T) {
	for _, c := range []struct {
		in   string
		args []string
		want string
	}{
		{"{\"prediction\": \"caf\xe9\", \"reference\": \"a\"}", nil, `stdin:1: field "prediction": invalid UTF-8`},
		{"{\"prediction\": \"a\", \"reference\": \"a\", \"context\": [\"ok\", \"\xff\"]}", nil, `stdin:1: field "context[1]": invalid UTF-8`},
		{`{"prediction": "a", "reference": "` + strings.Repeat("r", 40) + `"}`, []string{"--max-field-bytes", "30"},
			`stdin:1: field "reference": 40 bytes, more than the 30 allowed (--max-field-bytes)`},
		// "references" entries are bounded too (they were not checked).
		{`{"prediction": "a", "references": ["b", "` + strings.Repeat("r", 40) + `"]}`, []string{"--max-field-bytes", "30"},
			`stdin:1: field "references[1]": 40 bytes, more than the 30 allowed (--max-field-bytes)`},
		{`{"prediction": "a", "reference": "` + strings.Repeat("r", 400) + `"}`, []string{"--max-line-bytes", "100"},
			`stdin:1: line is 437 bytes, more than the 100 allowed (--max-line-bytes)`},
	} {
		_, _, err := runScoreCmd(t, c.in+"\n", append([]string{"score"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("input %.60q: error %v, want %q", c.in, err, c.want)
		}
	}
	in := `{"prediction": "a", "reference": "` + strings.Repeat("r", 400) + `"}` + "\n" + `{"prediction": "b", "reference": "b"}` + "\n"
	out, stderr, err := runScoreCmd(t, in, "score", "--skip-bad", "--max-line-bytes", "100")
	if got := parseScoreLines(t, out); err != nil || len(got) != 1 || got[0].Line != 2 || !strings.Contains(stderr, "skipped 1 malformed") {
		t.Errorf("skip-bad over a long line: %v %+v %q", err, got, stderr)
	}
}

func TestScoreCommandBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"score", "--alpha", "-1"},
		{"score", "--beta", "NaN"},
		{"score", "--tokenizer", "nltk"},
		{"score", "--hit", "both"},
	} {
		if _, _, err := runScoreCmd(t, `{"prediction":"a","reference":"a"}`, args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	if _, _, err := runScoreCmd(t, "", "score", filepath.Join(t.TempDir(), "missing.jsonl")); err == nil {
		t.Error("missing file accepted")
	}
}

// "references": the hand-computed case of hser's multi-reference test: "the
// tower" against "tower" (EM 1) and "the tower here" (Rouge-L P 1, R 2/3, F .8).
func TestScoreCommandSeveralReferences(t *testing.T) {
	in := `{"prediction": "the tower", "references": ["tower", "the tower here"]}
{"prediction": "the tower", "reference": "tower", "references": ["the tower here"]}
{"prediction": "the tower", "reference": "the tower here"}
`
	out, _, err := runScoreCmd(t, in, "score", "--alpha", "1", "--beta", "0")
	if err != nil {
		t.Fatal(err)
	}
	got := parseScoreLines(t, out)
	for _, s := range got[:2] {
		if s.RougeP != 1 || s.RougeF1 < 0.8-1e-12 || s.RougeF1 > 0.8+1e-12 || s.EM != 1 || s.SquadF1 != 1 {
			t.Errorf("line %d: %+v, want P 1, F1 .8, EM 1, SQuAD F1 1", s.Line, s)
		}
	}
	if s := got[2]; s.EM != 0 {
		t.Errorf("one reference: %+v", s)
	}
	if _, _, err := runScoreCmd(t, `{"prediction": "x", "references": []}`+"\n", "score"); err == nil || !strings.Contains(err.Error(), `"references"`) {
		t.Errorf("no reference: %v", err)
	}
}
