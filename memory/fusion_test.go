package memory

import (
	"math"
	"strings"
	"testing"
)

// BM25 over three memories, computed by hand: N 3, avgdl 2; idf(dog) =
// ln(1 + 1.5/2.5) = ln 1.6, idf(fish) = ln(1 + 2.5/1.5) = ln(8/3).
//
//	"cat dog":        dog tf 1, dl 2, norm 1:   idf(dog)·1.9/1.9          = 0.470004
//	"dog":            dog tf 1, dl 1, norm 0.8: idf(dog)·1.9/1.72         = 0.519190
//	"bird fish fish": fish tf 2, dl 3, norm 1.2: idf(fish)·2·1.9/(2+1.08) = 1.210114
func TestLexIndexBM25(t *testing.T) {
	x := newLexIndex([]Entry{{Text: "cat dog"}, {Text: "dog"}, {Text: "bird fish fish"}})
	terms := x.queryTerms("dog fish dog")
	if len(terms) != 2 {
		t.Fatalf("query terms %v, want dog and fish once each", terms)
	}
	for i, want := range []float64{0.470004, 0.519190, 1.210114} {
		if got := x.score(terms, i); math.Abs(got-want) > 1e-6 {
			t.Errorf("entry %d: BM25 %.6f, want %.6f", i, got, want)
		}
	}
	if got := x.score(x.queryTerms("horse"), 0); got != 0 {
		t.Errorf("no shared term: BM25 %v, want 0", got)
	}
}

// Fusions of scores (0.9, 0.5, 0.7) and BM25 (0, 1, 2), by hand:
//
//	rrf, k 1: ranks (1, 3, 2) and (3, 2, 1): 1/2+1/4, 1/4+1/3, 1/3+1/2
//	linear, λ 0.25: minmax (1, 0, 0.5) and (0, 0.5, 1): 0.75, 0.125, 0.625
func TestFuse(t *testing.T) {
	scores, lex := []float64{0.9, 0.5, 0.7}, []float64{0, 1, 2}
	for _, tc := range []struct {
		cfg  Config
		want []float64
	}{
		{Config{Fusion: FusionRRF, FusionK: 1}, []float64{0.75, 7.0 / 12, 5.0 / 6}},
		{Config{Fusion: FusionLinear, LexicalWeight: 0.25}, []float64{0.75, 0.125, 0.625}},
		{Config{Fusion: FusionNone}, []float64{0.9, 0.5, 0.7}},
	} {
		got := fuse(tc.cfg, scores, lex)
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-12 {
				t.Errorf("%s: fused %v, want %v", tc.cfg.Fusion, got, tc.want)
				break
			}
		}
	}
}

// Ties share the best rank (a memory no query word reaches is not ranked
// below another that none reaches either); min–max of a constant list is 0.
func TestRanksAndMinmaxTies(t *testing.T) {
	r := ranks([]float64{0, 2, 0, 1})
	for i, want := range []float64{3, 1, 3, 2} {
		if r[i] != want {
			t.Fatalf("ranks %v, want [3 1 3 2]", r)
		}
	}
	for _, v := range minmax([]float64{4, 4}) {
		if v != 0 {
			t.Fatalf("minmax of a constant list: %v, want zeros", v)
		}
	}
}

func TestFusionConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Fusion = "max" }, "fusion"},
		{func(c *Config) { c.Fusion = FusionRRF; c.FusionK = 0 }, "fusion_k"},
		{func(c *Config) { c.LexicalWeight = 1.5 }, "lexical_weight"},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error naming %s, got %v", tc.want, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}
