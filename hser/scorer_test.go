package hser

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestUnicodeTokenizer(t *testing.T) {
	s := mustScorer(t, DefaultConfig())
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"Hello, World!", []string{"hello", "world"}},
		{"Café Müller", []string{"café", "müller"}},             // accents kept
		{"Cafe\u0301 MU\u0308LLER", []string{"café", "müller"}}, // NFD → NFC
		{"北京是中国的首都", []string{"北", "京", "是", "中", "国", "的", "首", "都"}},
		{"2024年东京タワーに行った", []string{"2024", "年", "东", "京", "タ", "ワ", "ー", "に", "行", "っ", "た"}},
		{"서울 특별시", []string{"서", "울", "특", "별", "시"}},
		{"ΟΔΟΣ οδος", []string{"οδοσ", "οδοσ"}}, // ς and σ fold together
		{"Straße STRASSE", []string{"straße", "strasse"}},
		{"don't x_y", []string{"don", "t", "x", "y"}},
		{"Привет, мир", []string{"привет", "мир"}},
		{"हिन्दी भाषा", []string{"हिन्दी", "भाषा"}}, // vowel signs stay in the word
		{"\u0301abc", []string{"abc"}},              // leading mark dropped
		{"x\xffy", []string{"x", "y"}},              // invalid UTF-8 separates
		{"", []string{}},
	} {
		if got := s.Tokens(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Tokens(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	stem := DefaultConfig()
	stem.Stem = true
	if got, want := mustScorer(t, stem).Tokens("Dogs are running 北京 cafés"), []string{"dog", "are", "run", "北", "京", "cafés"}; !slices.Equal(got, want) {
		t.Errorf("stemmed unicode tokens = %q, want %q", got, want)
	}
}

// TestChineseScores: the point of the unicode tokenizer. rouge-score scores
// any CJK pair 0; the unicode tokenizer scores characters.
func TestChineseScores(t *testing.T) {
	pred, ref := "北京是首都", "首都是北京"
	if g := mustScorer(t, rougeCfg(false)).Score(pred, ref, nil); g.RougeF1 != 0 {
		t.Errorf("rouge-score tokenizer F1 = %v, want 0 (it erases CJK)", g.RougeF1)
	}
	g := mustScorer(t, DefaultConfig()).Score(pred, ref, []string{"中国的首都是北京。"})
	// Tokens 北 京 是 首 都 vs 首 都 是 北 京: LCS 2 ("首都" or "北京"), P = R = 2/5.
	// F1 in float64 as Python evaluates it: 2*0.4*0.4/(0.4+0.4) = 0.4000000000000001.
	p := 2.0 / 5
	if !same(g.RougeP, p) || !same(g.RougeR, p) || !same(g.RougeF1, 0.4000000000000001) {
		t.Errorf("unicode rouge = %v %v %v, want 0.4 0.4 0.4000000000000001", g.RougeP, g.RougeR, g.RougeF1)
	}
	// SQuAD's normalization splits on whitespace only: each side is one
	// token, and they differ.
	if g.EM != 0 || g.SquadEM != 0 || g.SquadF1 != 0 {
		t.Errorf("em %v squad em %v f1 %v, want 0, 0 and 0 (one different token each under SQuAD)", g.EM, g.SquadEM, g.SquadF1)
	}
	if g := mustScorer(t, DefaultConfig()).Score("北京 首都", "首都 北京", nil); g.EM != 0 || g.SquadEM != 0 || !same(g.SquadF1, 1) {
		t.Errorf("em %v squad em %v f1 %v, want 0, 0 and 1 (same bag of whitespace tokens)", g.EM, g.SquadEM, g.SquadF1)
	}
	if g.Hit != 0 {
		t.Errorf("hit = 1, but 北京是首都 is not in the chunk")
	}
	if g := mustScorer(t, DefaultConfig()).Score("北京", ref, []string{"中国的首都是北京。"}); g.Hit != 1 {
		t.Errorf("hit = 0 for 北京 in 中国的首都是北京")
	}
}

func TestUnicodeEM(t *testing.T) {
	s := mustScorer(t, DefaultConfig())
	for _, c := range []struct {
		pred, ref string
		em        float64
	}{
		{"The Eiffel Tower.", "eiffel tower", 1},
		{"Café", "cafe", 0},
		{"北京", "北 京!", 1},
		{"", "", 1}, // as in SQuAD: two empty answers match
		{"a", "", 1},
		{"Paris", "Paris, France", 0},
	} {
		if g := s.Score(c.pred, c.ref, nil); g.EM != c.em {
			t.Errorf("EM(%q, %q) = %v, want %v", c.pred, c.ref, g.EM, c.em)
		}
	}
}

// TestSQuADMetricsIgnoreTokenizer: squad_em and squad_f1 are the official
// SQuAD v1.1 numbers under both tokenizers; the reward's EM follows the
// tokenizer. Official values by hand: normalize_answer deletes the comma,
// so "2,000" and "2000" are both "2000" (EM 1, F1 1); the unicode tokens
// are "2" "000" against "2000" (reward EM 0). "U.S. Army" against "US army":
// SQuAD "us army" twice (EM 1); unicode "u" "s" "army" vs "us" "army".
// "the café" / "cafe": SQuAD "café" vs "cafe" (EM 0, F1 0).
func TestSQuADMetricsIgnoreTokenizer(t *testing.T) {
	cases := []struct {
		pred, ref          string
		squadEM, squadF1   float64
		unicodeEM, rougeEM float64
	}{
		{"2,000", "2000", 1, 1, 0, 1},
		{"U.S. Army", "US army", 1, 1, 0, 1},
		{"the café", "cafe", 0, 0, 0, 0},
		{"Paris, France", "paris", 0, 2.0 / 3, 0, 0}, // P 1/2, R 1: F1 2/3
		{"The Eiffel Tower", "eiffel tower", 1, 1, 1, 1},
	}
	uni, stemUni := DefaultConfig(), DefaultConfig()
	stemUni.Stem = true
	for _, c := range cases {
		for _, cfg := range []Config{uni, stemUni, rougeCfg(false), rougeCfg(true)} {
			g := mustScorer(t, cfg).Score(c.pred, c.ref, nil)
			if g.SquadEM != c.squadEM || math.Abs(g.SquadF1-c.squadF1) > 1e-15 {
				t.Errorf("%s stem=%v: SQuAD EM/F1(%q, %q) = %v %v, want %v %v", cfg.Tokenizer, cfg.Stem, c.pred, c.ref,
					g.SquadEM, g.SquadF1, c.squadEM, c.squadF1)
			}
			want := c.unicodeEM
			if cfg.Tokenizer == TokenizerRougeScore {
				want = c.rougeEM
			}
			if g.EM != want {
				t.Errorf("%s stem=%v: reward EM(%q, %q) = %v, want %v", cfg.Tokenizer, cfg.Stem, c.pred, c.ref, g.EM, want)
			}
		}
	}
	if DefaultConfig().EMNormalization() != NormUnicode || rougeCfg(false).EMNormalization() != NormSQuAD {
		t.Error("EMNormalization does not follow the tokenizer")
	}
}

func TestHit(t *testing.T) {
	ctx := []string{"The tower was built in 1889 by Gustave Eiffel.", "Paris is the capital of France."}
	for _, tok := range []string{TokenizerUnicode, TokenizerRougeScore} {
		cfg := DefaultConfig()
		cfg.Tokenizer = tok
		s := mustScorer(t, cfg)
		gcfg := cfg
		gcfg.Hit = HitGold
		gold := mustScorer(t, gcfg)
		for _, c := range []struct {
			pred, ref string
			ctx       []string
			hit, gold float64
		}{
			{"Gustave Eiffel", "1889", ctx, 1, 1},
			{"the capital of France!", "London", ctx, 1, 0},
			{"capital of Spain", "Paris", ctx, 0, 1},
			{"Eiff", "Paris", ctx, 0, 1}, // token boundaries: "eiff" is not a word of the chunk
			{"", "Paris", ctx, 0, 1},     // an empty answer never hits
			{"  \t\n", "Paris", ctx, 0, 1},
			{"the", "Paris", ctx, 0, 1}, // normalizes to nothing
			{"...", "", ctx, 0, 0},
			{"Paris", "Paris", nil, 0, 0},
			{"France. Paris", "x", ctx, 0, 0}, // does not span chunks
		} {
			if g := s.Score(c.pred, c.ref, c.ctx); g.Hit != c.hit {
				t.Errorf("%s: hit(%q) = %v, want %v", tok, c.pred, g.Hit, c.hit)
			}
			if g := gold.Score(c.pred, c.ref, c.ctx); g.Hit != c.gold {
				t.Errorf("%s: gold hit(%q) = %v, want %v", tok, c.ref, g.Hit, c.gold)
			}
		}
	}
}

func TestRewardAndWeights(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Alpha, cfg.Beta = 0.5, 2
	g := mustScorer(t, cfg).Score("Paris", "paris", []string{"Paris is big"})
	if g.RougeF1 != 1 || g.EM != 1 || g.Hit != 1 || g.Alpha != 0.5 || g.Beta != 2 || g.Reward != 3.5 {
		t.Errorf("score = %+v, want F1 1, EM 1, Hit 1, reward 1+0.5+2 = 3.5", g)
	}
	for _, bad := range []Config{
		{Weights: Weights{Alpha: -1, Beta: 1}, Tokenizer: "unicode", Hit: "answer"},
		{Weights: Weights{Alpha: 1, Beta: math.Inf(1)}, Tokenizer: "unicode", Hit: "answer"},
		{Weights: Weights{Alpha: math.NaN(), Beta: 1}, Tokenizer: "unicode", Hit: "answer"},
		{Weights: Weights{Alpha: 1, Beta: 1}, Tokenizer: "nltk", Hit: "answer"},
		{Weights: Weights{Alpha: 1, Beta: 1}, Tokenizer: "unicode", Hit: "both"},
	} {
		if _, err := NewScorer(bad); err == nil {
			t.Errorf("NewScorer(%+v) accepted an invalid config", bad)
		}
	}
}

// randomIDs draws n ids from a small vocabulary, so there is overlap.
func randomIDs(r *rand.Rand, n, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.IntN(vocab))
	}
	return out
}

// TestLCSBitsMatchesDP checks the bit-parallel LCS against the DP oracle on
// random inputs, across the 64-bit word boundaries.
func TestLCSBitsMatchesDP(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var peq, v []uint64
	for iter := 0; iter < 3000; iter++ {
		na, nb := r.IntN(200), r.IntN(200)
		if iter%3 == 0 {
			na, nb = r.IntN(70), r.IntN(70)
		}
		vocab := 1 + r.IntN(20)
		a, b := randomIDs(r, na, vocab), randomIDs(r, nb, vocab)
		var got int
		got, peq, v = lcsBits(a, b, vocab, peq, v)
		if want := lcsDP(a, b); got != want {
			t.Fatalf("lcsBits(%v, %v) = %d, DP says %d", a, b, got, want)
		}
	}
}

// TestRougeProperties: invariants of Rouge-L on random word strings.
func TestRougeProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	words := strings.Fields("paris france capital the of is a tower eiffel built 1889 river seine")
	s := mustScorer(t, DefaultConfig())
	sentence := func() string {
		n := r.IntN(30)
		w := make([]string, n)
		for i := range w {
			w[i] = words[r.IntN(len(words))]
		}
		return strings.Join(w, " ")
	}
	for range 2000 {
		a, b := sentence(), sentence()
		ab, ba := s.Score(a, b, nil), s.Score(b, a, nil)
		if !same(ab.RougeP, ba.RougeR) || !same(ab.RougeF1, ba.RougeF1) {
			t.Fatalf("swap: %+v vs %+v", ab, ba)
		}
		if ab.RougeF1 < 0 || ab.RougeF1 > 1 || ab.SquadF1 < 0 || ab.SquadF1 > 1 {
			t.Fatalf("out of range: %+v", ab)
		}
		if a != "" {
			if aa := s.Score(a, a, nil); aa.RougeF1 != 1 || aa.EM != 1 {
				t.Fatalf("self score of %q = %+v", a, aa)
			}
		}
	}
}

func TestConcurrentScoring(t *testing.T) {
	s := mustScorer(t, rougeCfg(true))
	want := s.Score("dogs are running quickly", "the dog runs quick", nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if got := s.Score("dogs are running quickly", "the dog runs quick", nil); got != want {
					t.Errorf("concurrent score %+v != %+v", got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestUnicodeEMFastPath: with the unicode tokenizer and no stemming, EM and
// F1 come from the Rouge token ids; with stemming, from a separate
// normalization. Both must agree (stemming never touches EM or F1).
func TestUnicodeEMFastPath(t *testing.T) {
	fast := mustScorer(t, DefaultConfig())
	c := DefaultConfig()
	c.Stem = true
	slow := mustScorer(t, c)
	r := rand.New(rand.NewPCG(9, 9))
	words := strings.Fields("the a an The A Paris paris 北 京 café CAFÉ 42 , . x")
	text := func() string {
		w := make([]string, r.IntN(8))
		for i := range w {
			w[i] = words[r.IntN(len(words))]
		}
		return strings.Join(w, " ")
	}
	for range 5000 {
		p, q := text(), text()
		a, b := fast.Score(p, q, nil), slow.Score(p, q, nil)
		if a.EM != b.EM || !same(a.SquadF1, b.SquadF1) {
			t.Fatalf("(%q, %q): fast EM %v F1 %v, slow EM %v F1 %v", p, q, a.EM, a.SquadF1, b.EM, b.SquadF1)
		}
	}
}
