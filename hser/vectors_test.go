package hser

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

type sharedVector struct {
	Name        string  `json:"name"`
	Prediction  string  `json:"prediction"`
	Reference   string  `json:"reference"`
	RougeP      float64 `json:"rougeL_p"`
	RougeR      float64 `json:"rougeL_r"`
	RougeF1     float64 `json:"rougeL_f1"`
	RougePStem  float64 `json:"rougeL_p_stem"`
	RougeRStem  float64 `json:"rougeL_r_stem"`
	RougeF1Stem float64 `json:"rougeL_f1_stem"`
	SquadEM     bool    `json:"squad_em"`
	SquadF1     float64 `json:"squad_f1"`
}

func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s:%d: %v", path, line, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// same compares floats to the bit.
func same(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

// TestSharedVectors: the 12 reference vectors, both stemming modes, EM and
// SQuAD F1, bit for bit.
func TestSharedVectors(t *testing.T) {
	vecs := readJSONL[sharedVector](t, sharedtest.Shared(t, "metrics/rouge_squad_vectors.jsonl"))
	if len(vecs) != 12 {
		t.Fatalf("read %d vectors, want 12", len(vecs))
	}
	plain, stem := mustScorer(t, rougeCfg(false)), mustScorer(t, rougeCfg(true))
	uni := mustScorer(t, DefaultConfig())
	for _, v := range vecs {
		g := plain.Score(v.Prediction, v.Reference, nil)
		gs := stem.Score(v.Prediction, v.Reference, nil)
		gu := uni.Score(v.Prediction, v.Reference, nil)
		em := 0.0
		if v.SquadEM {
			em = 1
		}
		for _, c := range []struct {
			what      string
			got, want float64
		}{
			{"rougeL_p", g.RougeP, v.RougeP}, {"rougeL_r", g.RougeR, v.RougeR}, {"rougeL_f1", g.RougeF1, v.RougeF1},
			{"rougeL_p_stem", gs.RougeP, v.RougePStem}, {"rougeL_r_stem", gs.RougeR, v.RougeRStem},
			{"rougeL_f1_stem", gs.RougeF1, v.RougeF1Stem},
			{"em", g.EM, em}, {"em_stem", gs.EM, em}, {"squad_f1", g.SquadF1, v.SquadF1},
			{"squad_em", g.SquadEM, em}, {"squad_em_stem", gs.SquadEM, em},
			// SQuAD's numbers do not depend on the reward's tokenizer.
			{"squad_em_unicode", gu.SquadEM, em}, {"squad_f1_unicode", gu.SquadF1, v.SquadF1},
		} {
			if !same(c.got, c.want) {
				t.Errorf("%s: %s = %v (%#x), want %v (%#x)", v.Name, c.what, c.got,
					math.Float64bits(c.got), c.want, math.Float64bits(c.want))
			}
		}
	}
}

type oracleRow struct {
	Kind       string  `json:"kind"`
	Text       string  `json:"text"`
	Rouge      any     `json:"rouge"`
	RougeStem  any     `json:"rouge_stem"`
	Squad      string  `json:"squad"`
	Prediction string  `json:"prediction"`
	Reference  string  `json:"reference"`
	EM         bool    `json:"em"`
	F1         float64 `json:"f1"`
}

func toStrings(v any) []string {
	out := []string{}
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func toTriple(v any) [3]float64 {
	var out [3]float64
	for i, x := range v.([]any) {
		out[i] = x.(float64)
	}
	return out
}

// TestPythonOracle checks tokenization, normalize_answer and pair scores
// against Python 3 running the reference code (testdata/gen_oracle.py):
// Unicode corner cases (İ, KELVIN SIGN, final sigma, combining marks next to
// articles, U+001C–U+001F whitespace) and 300 pairs from real answers.
func TestPythonOracle(t *testing.T) {
	rows := readJSONL[oracleRow](t, "testdata/python_oracle.jsonl")
	plain, stem := mustScorer(t, rougeCfg(false)), mustScorer(t, rougeCfg(true))
	uni := mustScorer(t, DefaultConfig())
	pairs, unicodeDiffers := 0, 0
	for i, r := range rows {
		switch r.Kind {
		case "text":
			if got, want := plain.Tokens(r.Text), toStrings(r.Rouge); !slices.Equal(got, want) {
				t.Errorf("row %d: tokens(%q) = %q, want %q", i+1, r.Text, got, want)
			}
			if got, want := stem.Tokens(r.Text), toStrings(r.RougeStem); !slices.Equal(got, want) {
				t.Errorf("row %d: stemmed tokens(%q) = %q, want %q", i+1, r.Text, got, want)
			}
			if got := NormalizeAnswer(r.Text); got != r.Squad {
				t.Errorf("row %d: NormalizeAnswer(%q) = %q, want %q", i+1, r.Text, got, r.Squad)
			}
		case "pair":
			pairs++
			g, gs := plain.Score(r.Prediction, r.Reference, nil), stem.Score(r.Prediction, r.Reference, nil)
			want, wantS := toTriple(r.Rouge), toTriple(r.RougeStem)
			if !same(g.RougeP, want[0]) || !same(g.RougeR, want[1]) || !same(g.RougeF1, want[2]) {
				t.Errorf("row %d: rouge = %v %v %v, want %v", i+1, g.RougeP, g.RougeR, g.RougeF1, want)
			}
			if !same(gs.RougeP, wantS[0]) || !same(gs.RougeR, wantS[1]) || !same(gs.RougeF1, wantS[2]) {
				t.Errorf("row %d: stemmed rouge = %v %v %v, want %v", i+1, gs.RougeP, gs.RougeR, gs.RougeF1, wantS)
			}
			if (g.EM == 1) != r.EM || (g.SquadEM == 1) != r.EM || !same(g.SquadF1, r.F1) {
				t.Errorf("row %d: em %v squad em %v f1 %v, want %v %v (%q vs %q)", i+1, g.EM, g.SquadEM, g.SquadF1, r.EM, r.F1, r.Prediction, r.Reference)
			}
			// The default unicode tokenizer changes the reward's EM, never
			// the SQuAD numbers.
			gu := uni.Score(r.Prediction, r.Reference, nil)
			if (gu.SquadEM == 1) != r.EM || !same(gu.SquadF1, r.F1) {
				t.Errorf("row %d: unicode tokenizer: squad em %v f1 %v, want %v %v (%q vs %q)", i+1, gu.SquadEM, gu.SquadF1, r.EM, r.F1, r.Prediction, r.Reference)
			}
			if gu.EM != g.EM {
				unicodeDiffers++
			}
		}
	}
	if pairs < 300 {
		t.Fatalf("only %d pairs", pairs)
	}
	t.Logf("%d of %d pairs: the unicode reward EM differs from SQuAD EM", unicodeDiffers, pairs)
}
