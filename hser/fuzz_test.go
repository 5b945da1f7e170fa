package hser

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

var validRougeToken = regexp.MustCompile(`^[a-z0-9]+$`)

func fuzzSeeds(f *testing.F) {
	for _, s := range []string{"", "The quick brown fox", "İstanbul ΟΔΟΣ", "北京タワー서울", "x\xff\xfe\xc0y",
		"\u0301\u0301the", "yyyyyyyy", "a\x00b", strings.Repeat("ab ", 100),
		"Don’t “the” — the’s x’the’y…\u00a0an", "café’s straße — İstanbul’s “Σ”", "Ⓐ’ ’ “” —\u2028the"} {
		f.Add(s, "reference text")
	}
}

// FuzzScore: arbitrary bytes (invalid UTF-8 included) never panic and give
// scores in range, tokens of the documented shape and normalized answers
// with single spaces, under every tokenizer and stemming mode.
func FuzzScore(f *testing.F) {
	fuzzSeeds(f)
	scorers := []*Scorer{mustScorer(f, rougeCfg(false)), mustScorer(f, rougeCfg(true)), mustScorer(f, DefaultConfig())}
	stemU := DefaultConfig()
	stemU.Stem = true
	scorers = append(scorers, mustScorer(f, stemU))
	f.Fuzz(func(t *testing.T, pred, ref string) {
		// The unicode scorers with and without stemming agree on EM and F1.
		if a, b := scorers[2].Score(pred, ref, nil), scorers[3].Score(pred, ref, nil); a.EM != b.EM || !same(a.SquadF1, b.SquadF1) {
			t.Fatalf("unicode EM/F1 fast path %+v != %+v", a, b)
		}
		for i, s := range scorers {
			g := s.Score(pred, ref, []string{ref, pred})
			for _, v := range []float64{g.RougeP, g.RougeR, g.RougeF1, g.SquadF1} {
				if !(v >= 0 && v <= 1) {
					t.Fatalf("scorer %d: out of range %+v", i, g)
				}
			}
			if s.Normalize(pred) != "" && g.Hit != 1 {
				t.Fatalf("scorer %d: a non-empty answer must hit its own text: %+v", i, g)
			}
			for _, tok := range s.Tokens(pred) {
				if tok == "" || !utf8.ValidString(tok) {
					t.Fatalf("scorer %d: bad token %q", i, tok)
				}
				if i < 2 && !validRougeToken.MatchString(tok) {
					t.Fatalf("rouge-score token %q", tok)
				}
			}
			n := s.Normalize(pred)
			if strings.HasPrefix(n, " ") || strings.HasSuffix(n, " ") || strings.Contains(n, "  ") {
				t.Fatalf("scorer %d: normalized %q has stray spaces", i, n)
			}
		}
	})
}

// FuzzPorter: any ASCII lowercase word stems without panic, to a non-empty
// lowercase word for a non-empty input.
func FuzzPorter(f *testing.F) {
	for _, s := range []string{"generously", "yyyy", "ies", "sses", "eed", "ing", "alli", "logi", "y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w := []byte(strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' {
				return r
			}
			return -1
		}, s))
		got := porterStem(w)
		if len(w) > 0 && len(got) == 0 {
			t.Fatalf("stem(%q) is empty", w)
		}
	})
}

// TestLongInputs: inputs of hundreds of kilobytes to a megabyte, pathological for naive code (a run of
// y's for the Porter consonant test, one giant token, many tokens).
func TestLongInputs(t *testing.T) {
	long := []string{
		strings.Repeat("y", 1<<20),
		strings.Repeat("ational", 1<<15),
		strings.Repeat("the ", 1<<16),
		strings.Repeat("北京\xff", 1<<15),
		strings.Repeat("a\u0301", 1<<16),
	}
	for _, cfg := range []Config{rougeCfg(true), DefaultConfig()} {
		s := mustScorer(t, cfg)
		for _, x := range long {
			g := s.Score(x, "the reference", []string{x[:1000]})
			if !(g.RougeF1 >= 0 && g.RougeF1 <= 1) {
				t.Errorf("bad score %+v", g)
			}
		}
	}
}

// FuzzSQuADASCIIPath: the one-pass ASCII normalizer equals the step-by-step
// one on every ASCII input.
func FuzzSQuADASCIIPath(f *testing.F) {
	for _, s := range []string{"The_the a_b", "t.h.e x\x00the\x00y", "A-n apple", "  \x1ca\x1d ", "don't"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !isASCII(s) {
			return
		}
		var tmp []byte
		if a, b := string(appendSQuADNormalizedASCII(nil, s)), string(appendSQuADNormalizedGeneral(nil, s, &tmp)); a != b {
			t.Fatalf("%q: ASCII path %q, general path %q", s, a, b)
		}
	})
}

func TestSQuADASCIIPathRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	alphabet := []string{"a", "an", "the", "The", "A", "x", "_", "-", ".", "'", " ", "\t", "\x1c", "\x00", "\x7f", "Q", "9", "n", "t", "h", "e",
		"Internationalization", "ABCDEFGH", "0123456789abcdefXYZ"} // runs of 8 and more bytes
	var tmp []byte
	for range 20000 {
		var sb strings.Builder
		for range r.IntN(16) {
			sb.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		s := sb.String()
		if a, b := string(appendSQuADNormalizedASCII(nil, s)), string(appendSQuADNormalizedGeneral(nil, s, &tmp)); a != b {
			t.Fatalf("%q: ASCII path %q, general path %q", s, a, b)
		}
	}
}
