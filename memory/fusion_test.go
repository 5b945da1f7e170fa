package memory

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/himes-rl/himes/embedding"
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

// Activation with fusion over a store: three memories whose cosines with
// the query are 0.9, 0.5 and 0.7 and whose BM25 for "dog fish" is
// TestLexIndexBM25's (0.470004, 0.519190, 1.210114). By hand:
//
//	none:          cat dog (0.9), bird fish fish (0.7), dog (0.5)
//	linear λ 0.5:  minmax cos (1, 0, 0.5), minmax BM25 (0, 0.066458, 1)
//	               → 0.5, 0.033229, 0.75: bird fish fish, cat dog, dog
//	rrf k 1:       0.75, 7/12, 5/6: bird fish fish, cat dog, dog
//
// top_n 2 keeps the first two; sim stays the cosine.
func TestActivateWithFusion(t *testing.T) {
	ctx := context.Background()
	emb, _ := embedding.NewHash(16)
	tax, _ := DefaultTaxonomy()
	cls, err := NewEmbeddingClassifier(ctx, tax, emb)
	if err != nil {
		t.Fatal(err)
	}
	l := tax.Labels()[0]
	vec := func(c float64) []float32 {
		v := make([]float32, 16)
		v[0], v[1] = float32(c), float32(math.Sqrt(1-c*c))
		return v
	}
	q := vec(1)
	for _, tc := range []struct {
		fusion string
		want   []string
		score0 float64
	}{
		{FusionNone, []string{"m1", "m3"}, 0.9},
		{FusionLinear, []string{"m3", "m1"}, 0.75},
		{FusionRRF, []string{"m3", "m1"}, 5.0 / 6},
	} {
		cfg := DefaultConfig()
		cfg.TopN, cfg.MinPartition, cfg.Fusion, cfg.LexicalWeight, cfg.FusionK = 2, 1000, tc.fusion, 0.5, 1
		m, err := NewStore(ctx, cfg, emb, tax, cls, []Entry{
			{User: "u", ID: "m1", Text: "cat dog", Topic: l.Topic, Subtopic: l.Subtopic, Embedding: vec(0.9)},
			{User: "u", ID: "m2", Text: "dog", Topic: l.Topic, Subtopic: l.Subtopic, Embedding: vec(0.5)},
			{User: "u", ID: "m3", Text: "bird fish fish", Topic: l.Topic, Subtopic: l.Subtopic, Embedding: vec(0.7)},
		})
		if err != nil {
			t.Fatal(err)
		}
		mems, _, err := m.Activate(ctx, "u", "dog fish", q)
		if err != nil {
			t.Fatal(err)
		}
		if len(mems) != 2 || mems[0].ID != tc.want[0] || mems[1].ID != tc.want[1] {
			t.Fatalf("fusion %s: activated %+v, want %v", tc.fusion, mems, tc.want)
		}
		if math.Abs(mems[0].Score-tc.score0) > 1e-5 {
			t.Errorf("fusion %s: top score %v, want %v", tc.fusion, mems[0].Score, tc.score0)
		}
		wantSim := map[string]float64{"m1": 0.9, "m3": 0.7}[mems[0].ID]
		if math.Abs(mems[0].Sim-wantSim) > 1e-6 {
			t.Errorf("fusion %s: sim %v, want the cosine %v", tc.fusion, mems[0].Sim, wantSim)
		}
	}
}
