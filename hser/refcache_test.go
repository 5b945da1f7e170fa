package hser

import (
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// refCacheConfigs: both tokenizers, stemming on and off, Hit on the
// answer and on the gold reference.
func refCacheConfigs() []Config {
	var out []Config
	for _, tok := range []string{TokenizerUnicode, TokenizerRougeScore} {
		for _, stem := range []bool{false, true} {
			for _, hit := range []string{HitAnswer, HitGold} {
				c := DefaultConfig()
				c.Tokenizer, c.Stem, c.Hit = tok, stem, hit
				out = append(out, c)
			}
		}
	}
	return out
}

// sameScore compares every field of two scores, floats to the bit.
func sameScore(a, b Score) bool {
	fa := [...]float64{a.RougeP, a.RougeR, a.RougeF1, a.EM, a.SquadEM, a.SquadF1, a.Hit, a.Alpha, a.Beta, a.Reward,
		a.RankReward, a.Gamma, a.RecallK, a.NDCGK, a.RR}
	fb := [...]float64{b.RougeP, b.RougeR, b.RougeF1, b.EM, b.SquadEM, b.SquadF1, b.Hit, b.Alpha, b.Beta, b.Reward,
		b.RankReward, b.Gamma, b.RecallK, b.NDCGK, b.RR}
	for i := range fa {
		if math.Float64bits(fa[i]) != math.Float64bits(fb[i]) {
			return false
		}
	}
	return a.Judged == b.Judged && a.FirstRelevant == b.FirstRelevant
}

// refCacheTexts gathers texts of every kind the scorer treats apart:
// the oracle and shared-vector texts, the fuzz seeds, random ASCII with
// control bytes and punctuation, mixed non-ASCII text, articles, empty
// and long texts. With real, also clips of real answers (shared data).
func refCacheTexts(t *testing.T, r *rand.Rand) []string {
	var texts []string
	for _, row := range readJSONL[oracleRow](t, "testdata/python_oracle.jsonl") {
		texts = append(texts, row.Text, row.Prediction, row.Reference)
	}
	for _, v := range readJSONL[sharedVector](t, sharedtest.Shared(t, "metrics/rouge_squad_vectors.jsonl")) {
		texts = append(texts, v.Prediction, v.Reference)
	}
	texts = append(texts, "", " ", "a", "the", "A an THE", "the the a", "...", "!?", "\x00", "a\x00b", "the\x01x",
		"\x7f", "x\ty\x1cz", "The quick brown fox", "İstanbul ΟΔΟΣ", "北京タワー서울", "x\xff\xfe\xc0y",
		"\u0301\u0301the", "yyyyyyyy", "Don’t “the” — the’s x’the’y…\u00a0an", "café’s straße — İstanbul’s “Σ”",
		"Ⓐ’ ’ “” —\u2028the", "generously running runners ran", "internationalization-INTERNATIONALIZATION",
		// Long words whose stems are short, next to the short words with
		// the same stems.
		"Compartmentalization rationalizations, characterization conditionally responsibilities",
		"compartmental rational characterize conditional responsible",
		strings.Repeat("ab ", 100), strings.Repeat("the ", 700), strings.Repeat("Word", 300),
		strings.Repeat("alpha beta gamma delta ", 120), strings.Repeat("y", 5000))
	for range 300 {
		texts = append(texts, randomASCII(r), scanText(r, r.IntN(5) == 0), mixedText(r))
	}
	// Porter's test words: long words whose stems are short, stems equal
	// to other words.
	var words []string
	for line := range strings.Lines(string(must(os.ReadFile("testdata/porter_nltk.tsv")))) {
		if w, _, ok := strings.Cut(line, "\t"); ok && !strings.HasPrefix(w, "#") {
			words = append(words, w)
		}
	}
	for range 200 {
		var b strings.Builder
		for range r.IntN(40) {
			w := words[r.IntN(len(words))]
			if r.IntN(4) == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			b.WriteString(w + [...]string{" ", ", ", "-", " the "}[r.IntN(4)])
		}
		texts = append(texts, b.String())
	}
	for range 100 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		texts = append(texts, sepText(b))
	}
	return texts
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// variant derives a prediction from ref that shares some of its tokens:
// itself, a clip, another case, articles or punctuation added, or ref with
// another text appended or prepended.
func variant(r *rand.Rand, ref string, texts []string) string {
	other := texts[r.IntN(len(texts))]
	switch r.IntN(8) {
	case 0:
		return ref
	case 1:
		i := r.IntN(len(ref) + 1)
		return ref[i:]
	case 2:
		return strings.ToUpper(ref)
	case 3:
		return "the " + ref + ", a."
	case 4:
		return ref + " " + other
	case 5:
		return other + ref
	case 6:
		return strings.Repeat(ref+" ", 1+r.IntN(6)) // longer than the table was sized for
	}
	return other
}

// checkRefCache scores each pair with each cached scorer and with its
// uncached twin (noRefCache: the pair scanned and interned whole,
// prediction first, as before the cache) and fails on any difference.
// It returns the number of comparisons and how many of them found the
// cached scorer's scratch holding the pair's reference already (a hit,
// unless the prediction is not ASCII or does not fit).
func checkRefCache(t *testing.T, cached, plain []*Scorer, pairs [][2]string, ctx func(i int) []string) (n, held int) {
	t.Helper()
	for i, p := range pairs {
		c := ctx(i)
		for k := range cached {
			sc := cached[k].pool.Get().(*scratch)
			if sc.refOK && sc.refStr == p[1] {
				held++
			}
			cached[k].pool.Put(sc)
			got, want := cached[k].Score(p[0], p[1], c), plain[k].Score(p[0], p[1], c)
			if !sameScore(got, want) {
				t.Fatalf("%+v: pair %d (%q, %q) context %q: cached %+v, uncached %+v", cached[k].cfg, i, p[0], p[1], c, got, want)
			}
			n++
		}
	}
	return n, held
}

// refCacheScorers returns a scorer per configuration of refCacheConfigs,
// and its twin with the prepared reference off.
func refCacheScorers(t *testing.T) (cached, plain []*Scorer) {
	for _, cfg := range refCacheConfigs() {
		cached = append(cached, mustScorer(t, cfg))
		u := mustScorer(t, cfg)
		u.noRefCache = true
		plain = append(plain, u)
	}
	return cached, plain
}

// TestRefCacheBitIdentical: with references repeating — groups of 8
// predictions per reference, alternating references, a reference equal but
// not the same string, predictions that do not fit the table or are not
// ASCII — every field of every score equals the uncached scorer's, for
// every tokenizer, stemming mode and Hit mode, with and without context.
func TestRefCacheBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	texts := refCacheTexts(t, r)
	cached, plain := refCacheScorers(t)
	// Groups of 8 answers per reference (GRPO), then the same references
	// alternating two by two, then every reference against the next text.
	var pairs [][2]string
	for range 600 {
		ref := texts[r.IntN(len(texts))]
		for range 8 {
			pairs = append(pairs, [2]string{variant(r, ref, texts), ref})
		}
		if r.IntN(4) == 0 { // the same bytes in another string
			pairs = append(pairs, [2]string{variant(r, ref, texts), strings.Clone(ref)})
		}
	}
	for range 1000 {
		a, b := texts[r.IntN(len(texts))], texts[r.IntN(len(texts))]
		for range 1 + r.IntN(4) {
			pairs = append(pairs, [2]string{variant(r, a, texts), a}, [2]string{variant(r, b, texts), b})
		}
	}
	for i, x := range texts {
		pairs = append(pairs, [2]string{texts[(i+1)%len(texts)], x}, [2]string{x, x})
	}
	ctx := func(i int) []string {
		switch i % 3 {
		case 0:
			return nil
		case 1:
			return []string{pairs[i][1], "x " + pairs[i][0] + " y"}
		}
		return []string{texts[i%len(texts)], texts[(7*i)%len(texts)]}
	}
	n, held := checkRefCache(t, cached, plain, pairs, ctx)
	// ScoreMulti: one prediction against several references.
	for i := 0; i+3 < len(pairs); i += 97 {
		refs := []string{pairs[i][1], pairs[i+1][1], pairs[i][1]}
		for k := range cached {
			got, want := cached[k].ScoreMulti(pairs[i][0], refs, ctx(i)), plain[k].ScoreMulti(pairs[i][0], refs, ctx(i))
			if !sameScore(got, want) {
				t.Fatalf("%+v: ScoreMulti(%q, %q): cached %+v, uncached %+v", cached[k].cfg, pairs[i][0], refs, got, want)
			}
			n++
		}
	}
	t.Logf("%d scores compared (%d pairs × %d configurations, and ScoreMulti), the reference already held for %d", n, len(pairs), len(cached), held)
	if held < n/5 {
		t.Fatalf("the reference was held already for only %d of %d scores: the cache is hardly exercised", held, n)
	}
}

// TestRefCacheRealGroups: real answer clips (the benchmark's), 8
// predictions per reference, with their retrieved chunks as context.
func TestRefCacheRealGroups(t *testing.T) {
	cached, plain := refCacheScorers(t)
	total := 0
	for _, nonASCII := range []bool{false, true} {
		real, ctxs := realPairs(t, nonASCII)
		var pairs [][2]string
		var pctx [][]string
		for g := 0; g+8 <= len(real); g += 8 {
			for j := range 8 {
				pairs = append(pairs, [2]string{real[g+j][0], real[g][1]})
				pctx = append(pctx, ctxs[g+j])
			}
		}
		n, _ := checkRefCache(t, cached, plain, pairs, func(i int) []string {
			if i%2 == 0 {
				return nil
			}
			return pctx[i]
		})
		total += n
	}
	t.Logf("%d real scores compared", total)
}

// FuzzRefCache: scoring p1 then p2 against one reference gives p2 the
// scores a fresh scorer gives it, and p1 again those it got first, for
// every tokenizer, stemming mode and Hit mode.
func FuzzRefCache(f *testing.F) {
	for _, s := range []string{"", "The quick brown fox", "İstanbul ΟΔΟΣ", "x\xff\xfe\xc0y", "a\x00b the", strings.Repeat("ab ", 100),
		"Don’t “the” — the’s", "running runners ran", "a an the"} {
		f.Add(s, "the quick brown fox jumps", "The brown fox, quick.")
		f.Add("reference text", s, "reference text")
		f.Add(s, s+" "+s, s)
	}
	cfgs := refCacheConfigs()
	cached := make([]*Scorer, len(cfgs))
	for i, cfg := range cfgs {
		cached[i] = mustScorer(f, cfg)
	}
	f.Fuzz(func(t *testing.T, p1, p2, ref string) {
		ctx := []string{ref + " " + p1, p2}
		for i, cfg := range cfgs {
			s := cached[i]
			g1 := s.Score(p1, ref, ctx)
			if want := mustScorer(t, cfg).Score(p1, ref, ctx); !sameScore(g1, want) {
				t.Fatalf("%+v: (%q, %q): %+v, fresh scorer %+v", cfg, p1, ref, g1, want)
			}
			g2 := s.Score(p2, ref, ctx)
			if want := mustScorer(t, cfg).Score(p2, ref, ctx); !sameScore(g2, want) {
				t.Fatalf("%+v: (%q after %q, %q): %+v, fresh scorer %+v", cfg, p2, p1, ref, g2, want)
			}
			if again := s.Score(p1, ref, ctx); !sameScore(again, g1) {
				t.Fatalf("%+v: (%q, %q) after %q: %+v, first %+v", cfg, p1, ref, p2, again, g1)
			}
		}
	})
}
