package hser

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// generalSQuAD is normalize_answer by the step-by-step general path, the
// oracle of the one-pass one.
func generalSQuAD(s string) string {
	var tmp []byte
	return string(appendSQuADNormalizedGeneral(nil, s, &tmp))
}

// TestSQuADFastSafeRunes: every character squadSafeRune accepts, alone and
// next to words, articles, punctuation and spaces, normalizes in one pass
// exactly as the general path does; the common ones (’ “ ” — – … no-break
// space) are accepted, and letters, numbers, cased symbols and invalid
// UTF-8 are not.
func TestSQuADFastSafeRunes(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): walks every Unicode code point through both normalizers")
	}
	checked := 0
	for r := rune(0x80); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) || !squadSafeRune(r) {
			continue
		}
		if !unicode.In(r, unicode.P, unicode.S, unicode.Z, unicode.C, unicode.M) && r%61 != 0 {
			continue // unassigned: a sample
		}
		checked++
		c := string(r)
		for _, in := range []string{c, "the" + c + "s", "x" + c + "the" + c + "y", "A" + c, c + "an", "don" + c + "t",
			"t.h.e" + c, c + c + " " + c, "Paris" + c + " " + c + "1889", " " + c + "\x00the", "a_" + c + "_n"} {
			got, ok := appendSQuADNormalizedFast(nil, in)
			if !ok {
				t.Fatalf("U+%04X: %q refused", r, in)
			}
			if want := generalSQuAD(in); string(got) != want {
				t.Fatalf("U+%04X: one pass %q, general %q", r, got, want)
			}
		}
	}
	if checked < 9000 {
		t.Fatalf("only %d characters checked", checked)
	}
	for _, c := range []string{"’", "“", "”", "—", "–", "…", "\u00a0", "\u2009", "\u3000", "\u0085", "®", "\u0301"} {
		if _, ok := appendSQuADNormalizedFast(nil, "x"+c+"y"); !ok {
			t.Errorf("%q refused", c)
		}
	}
	for _, c := range []string{"é", "ß", "İ", "Σ", "\u212a", "٣", "Ⅳ", "Ⓐ", "北", "\xff", "\ufffd"} {
		if _, ok := appendSQuADNormalizedFast(nil, "x"+c+"y"); ok {
			t.Errorf("%q accepted", c)
		}
	}
}

// mixedText draws answers mixing ASCII words, articles and punctuation with
// the non-ASCII characters of real text (curly quotes, dashes, no-break and
// other Unicode spaces) and now and then letters that are not safe (é ß İ Σ
// K).
func mixedText(r *rand.Rand) string {
	pieces := []string{"the", "The", "a", "AN", "an", "t.h.e", "don", "t", "Paris", "1889", "x", "_", "-", ".", "'", ",",
		" ", " ", " ", "\t", "\x00", "’", "’", "‘", "“", "”", "—", "–", "…", "•", "\u00a0", "\u2009", "\u0085", "\u3000",
		"®", "\u00ad", "\u0301", "é", "ß", "İ", "Σ", "\u212a", "café", "straße"}
	var b strings.Builder
	for range r.IntN(30) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

// TestSQuADMixedText: on mixed text, SQuAD EM and F1 from Score and
// NormalizeAnswer equal the official script's step by step (refSQuAD), and
// most texts without unsafe letters take the one-pass normalizer.
func TestSQuADMixedText(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): scores 20,000 random texts against the official script's steps")
	}
	r := rand.New(rand.NewPCG(21, 22))
	scorers := []*Scorer{mustScorer(t, DefaultConfig()), mustScorer(t, rougeCfg(false))}
	fast := 0
	for i := range 20000 {
		pred, ref := mixedText(r), mixedText(r)
		if i%5 == 0 {
			ref = pred
		}
		if got, want := NormalizeAnswer(pred), generalSQuAD(pred); got != want {
			t.Fatalf("NormalizeAnswer(%q) = %q, want %q", pred, got, want)
		}
		if _, ok := appendSQuADNormalizedFast(nil, pred); ok {
			fast++
		}
		wantEM, wantF1 := refSQuAD(pred, ref)
		for _, s := range scorers {
			var ctx []string
			if i%3 == 0 {
				ctx = []string{mixedText(r) + " " + pred}
			}
			g := s.Score(pred, ref, ctx)
			if g.SquadEM != wantEM || g.SquadF1 != wantF1 {
				t.Fatalf("%s: Score(%q, %q): squad EM %v F1 %v, want %v %v", s.cfg.Tokenizer, pred, ref, g.SquadEM, g.SquadF1, wantEM, wantF1)
			}
		}
	}
	if fast < 4000 {
		t.Fatalf("only %d of 20000 texts took the one-pass normalizer", fast)
	}
}

// FuzzSQuADMixedPath: whenever the one-pass normalizer accepts a text, it
// gives the general path's normalize_answer.
func FuzzSQuADMixedPath(f *testing.F) {
	for _, s := range []string{"the’s x’the’y", "don’t “a” — an\u00a0the", "t.h.e…", "\u0301the\u0085a", "İ’", "x\xff’"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := appendSQuADNormalizedFast(nil, s)
		if !ok {
			return
		}
		if want := generalSQuAD(s); string(got) != want {
			t.Fatalf("%q: one pass %q, general %q", s, got, want)
		}
	})
}

// sepPieces are ASCII words, articles and punctuation and the non-ASCII
// characters of real text that the fused path keeps (’ “ — …, no-break and
// other spaces, accented letters), plus Ⓐ, a separator for Rouge that
// lower() changes, and letters lower() or folding treat specially.
var sepPieces = []string{"the", "The", "a", "AN", "an", "t.h.e", "don", "t", "s", "Paris", "1889", "x", "y",
	"internationalization", "_", "-", ".", "'", ",", " ", " ", " ", "\t", "\n", "’", "’", "‘", "“", "”", "—", "–",
	"…", "•", "\u00a0", "\u2009", "\u0085", "\u3000", "®", "\u00ad", "\u2028", "Ⓐ", "\x00",
	"é", "É", "ß", "Σ", "µ", "İ", "Ⱥ", "ǅ", "Straße"}

// sepText makes text of sepPieces from b (each byte picks a piece).
func sepText(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		sb.WriteString(sepPieces[int(c)%len(sepPieces)])
	}
	return sb.String()
}

// checkSeparatorPaths checks Score on (pred, ref) against the oracles: SQuAD
// EM and F1 step by step (refSQuAD), Rouge-L from the general tokenizer and
// the textbook LCS, the reward's EM and Hit from the general normalizers.
func checkSeparatorPaths(t *testing.T, scorers []*Scorer, pred, ref string) {
	t.Helper()
	wantEM, wantF1 := refSQuAD(pred, ref)
	ctx := []string{"x " + pred + " y"}
	for _, s := range scorers {
		g := s.Score(pred, ref, ctx)
		if g.SquadEM != wantEM || g.SquadF1 != wantF1 {
			t.Fatalf("%s: Score(%q, %q): squad EM %v F1 %v, want %v %v", s.cfg.Tokenizer, pred, ref, g.SquadEM, g.SquadF1, wantEM, wantF1)
		}
		if p, r, f := slowRouge(s, pred, ref); !same(g.RougeP, p) || !same(g.RougeR, r) || !same(g.RougeF1, f) {
			t.Fatalf("%s: (%q, %q): rouge %v %v %v, want %v %v %v", s.cfg.Tokenizer, pred, ref, g.RougeP, g.RougeR, g.RougeF1, p, r, f)
		}
		var np, nr, nc string
		if s.unicode {
			np, nr, nc = s.Normalize(pred), s.Normalize(ref), s.Normalize(ctx[0])
		} else {
			np, nr, nc = generalSQuAD(pred), generalSQuAD(ref), generalSQuAD(ctx[0])
		}
		em, hit := 0.0, 0.0
		if np == nr {
			em = 1
		}
		if np != "" && strings.Contains(" "+nc+" ", " "+np+" ") {
			hit = 1
		}
		if g.EM != em || g.Hit != hit {
			t.Fatalf("%s: (%q, %q): EM %v Hit %v, want %v %v", s.cfg.Tokenizer, pred, ref, g.EM, g.Hit, em, hit)
		}
	}
}

// TestSQuADFusedSeparators: text whose non-ASCII characters are all
// separators SQuAD keeps scores as the oracles say, and mostly takes the
// fused path (SQuAD ids from the intern loop, fields holding such a
// character normalized on their own).
func TestSQuADFusedSeparators(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): scores 20,000 random texts against the oracles")
	}
	scorers := []*Scorer{mustScorer(t, DefaultConfig()), mustScorer(t, rougeCfg(false))}
	r := rand.New(rand.NewPCG(23, 24))
	fused, nonASCII := 0, 0
	for i := range 20000 {
		b := make([]byte, r.IntN(40))
		for j := range b {
			b[j] = byte(r.IntN(256))
		}
		pred := sepText(b)
		ref := sepText(b[r.IntN(len(b)+1):])
		if i%3 == 0 {
			ref = pred
		}
		checkSeparatorPaths(t, scorers, pred, ref)
		if !isASCII(pred + ref) {
			nonASCII++
			sc := new(scratch)
			scorers[0].rouge(sc, pred, ref)
			if sc.sqFused {
				fused++
			}
		}
	}
	if nonASCII < 15000 || fused < nonASCII/3 {
		t.Fatalf("%d non-ASCII pairs, %d fused", nonASCII, fused)
	}
}

// FuzzSeparatorPaths: TestSQuADFusedSeparators's checks on text built from
// the fuzzer's bytes.
func FuzzSeparatorPaths(f *testing.F) {
	f.Add([]byte{0, 24, 8, 20, 1, 30}, []byte{0, 24, 8})
	f.Add([]byte("the’s x’the’y"), []byte("\x19\x00\x18"))
	scorers := []*Scorer{mustScorer(f, DefaultConfig()), mustScorer(f, rougeCfg(false))}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		checkSeparatorPaths(t, scorers, sepText(a), sepText(b))
	})
}

// TestASCIIPrefix: asciiPrefix is the index of the first non-ASCII byte
// (or the length), at every offset around the 8-byte words.
func TestASCIIPrefix(t *testing.T) {
	for n := range 40 {
		for at := 0; at <= n; at++ {
			b := []byte(strings.Repeat("x", n))
			want := n
			if at < n {
				b[at], want = 0x80|byte(at), at
			}
			if got := asciiPrefix(string(b)); got != want {
				t.Fatalf("asciiPrefix(%q) = %d, want %d", b, got, want)
			}
		}
	}
}

// TestHitFromIDs: the reward's EM and Hit, whose normalized answers come
// from the interned ids, equal those of the general normalizers (unicode
// tokens minus articles, or normalize_answer step by step) on ASCII,
// SQuAD-style, mixed and separator text, for every tokenizer and stemming
// mode, with the answer inside a chunk, glued to it, or absent.
func TestHitFromIDs(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	gen := []func() string{
		func() string { return randomASCII(r) },
		func() string { return squadText(r, r.IntN(9) == 0) },
		func() string { return mixedText(r) },
		func() string {
			b := make([]byte, r.IntN(30))
			for j := range b {
				b[j] = byte(r.IntN(256))
			}
			return sepText(b)
		},
	}
	hits := 0
	for _, s := range fastPathScorers(t) {
		norm := s.Normalize
		if !s.unicode {
			norm = generalSQuAD
		}
		for i := range 8000 {
			g := gen[i%len(gen)]
			pred, ref := g(), g()
			if i%4 == 0 {
				ref = pred
			}
			ctx := []string{g() + []string{" ", "", "’"}[i%3] + pred + " " + g(), g()}
			if i%5 == 0 {
				ctx = ctx[1:]
			}
			got := s.Score(pred, ref, ctx)
			np, nr := norm(pred), norm(ref)
			hit := 0.0
			for _, c := range ctx {
				if np != "" && strings.Contains(" "+norm(c)+" ", " "+np+" ") {
					hit = 1
				}
			}
			em := 0.0
			if np == nr {
				em = 1
			}
			if got.Hit != hit || got.EM != em {
				t.Fatalf("%+v: Score(%q, %q, %q): EM %v Hit %v, want %v %v", s.cfg, pred, ref, ctx, got.EM, got.Hit, em, hit)
			}
			hits += int(hit)
		}
	}
	if hits < 8000 {
		t.Fatalf("only %d hits", hits)
	}
}

// TestRougeScoreFusedAnyText: with the rouge-score tokenizer every
// non-ASCII character but K (U+212A) and İ separates tokens, so text with
// letters (é, ß, Σ, CJK) and invalid bytes takes the fused path too, with
// the fields holding them normalized by the general path; scores are the
// oracles'.
func TestRougeScoreFusedAnyText(t *testing.T) {
	s := mustScorer(t, rougeCfg(false))
	r := rand.New(rand.NewPCG(27, 28))
	extra := []string{"é", "straße", "ΟΔΟΣ", "Σ", "北京", "\xff", "\xc3", "Ⱥ", "\u0301", "ǅ"}
	fusable := 0
	for i := range 10000 {
		pred, ref := mixedText(r), mixedText(r)
		pred += extra[r.IntN(len(extra))] + mixedText(r)
		if i%4 == 0 {
			ref = pred
		}
		checkSeparatorPaths(t, []*Scorer{s}, pred, ref)
		sc := new(scratch)
		s.rouge(sc, pred, ref)
		// Only control characters (SQuAD keeps them) and K, İ (tokens)
		// send a pair elsewhere.
		if !strings.ContainsAny(pred+ref, "\x00\u212a\u0130") {
			fusable++
			if !sc.sqFused {
				t.Fatalf("(%q, %q) not fused", pred, ref)
			}
		}
	}
	if fusable < 500 {
		t.Fatalf("only %d of 10000 pairs fusable", fusable)
	}
}

// TestKeptLetters: every letter and number keptLetter accepts is one
// token character for the general unicode tokenizer wherever it stands
// (between ASCII letters, after é, doubled, before a separator), folded as
// internFolded folds it; and a sample of such text scores as the oracles
// say through the fast path.
func TestKeptLetters(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): walks every Unicode letter and number through the tokenizer")
	}
	u := mustScorer(t, DefaultConfig())
	kept := 0
	var sample []string
	for r := rune(0x80); r <= unicode.MaxRune; r++ {
		if !unicode.IsLetter(r) && !unicode.IsNumber(r) || !keptLetter(string(r), r) {
			continue
		}
		kept++
		c := string(r)
		var tab internTable
		tab.reset(4)
		out := make([]byte, 64)
		_, w := tab.internFolded(out, 0, "Ab"+c)
		f := string(out[:w])
		for _, tc := range []struct {
			in   string
			want []string
		}{{"ab" + c + "cd", []string{"ab" + f[2:] + "cd"}}, {c + "’x", []string{f[2:], "x"}}, {"é" + c, []string{"é" + f[2:]}},
			{c + c + " " + c, []string{f[2:] + f[2:], f[2:]}}, {"Ab" + c, []string{f}}} {
			if got := u.Tokens(tc.in); !slices.Equal(got, tc.want) {
				t.Fatalf("U+%04X: Tokens(%q) = %q, want %q", r, tc.in, got, tc.want)
			}
		}
		if r%37 == 0 {
			sample = append(sample, c)
		}
	}
	if kept < 25000 {
		t.Fatalf("only %d letters kept", kept)
	}
	for r := rune(0x80); r < 0x250; r++ { // keptLetter's shortcut
		if c := string(r); (unicode.IsLetter(r) || unicode.IsNumber(r)) && !(norm.NFC.IsNormalString(c) && norm.NFC.PropertiesString(c).BoundaryBefore()) {
			t.Errorf("U+%04X is not an NFC-stable starter", r)
		}
	}
	for _, c := range []string{"北", "\u0301", "한", "\u212b", "ｶ"} { // Han, a mark, hangul, not NFC, kana
		if r, _ := utf8.DecodeRuneInString(c); keptLetter(c, r) {
			t.Errorf("%q kept", c)
		}
	}
	scorers := []*Scorer{u, mustScorer(t, rougeCfg(false))}
	r := rand.New(rand.NewPCG(29, 30))
	fused := 0
	for i := range 5000 {
		b := make([]byte, r.IntN(30))
		for j := range b {
			b[j] = byte(r.IntN(256))
		}
		pred := sepText(b) + sample[r.IntN(len(sample))] + sepText(b[r.IntN(len(b)+1):]) + "é"
		ref := sepText(b[r.IntN(len(b)+1):]) + sample[r.IntN(len(sample))]
		if i%3 == 0 {
			ref = pred
		}
		checkSeparatorPaths(t, scorers, pred, ref)
		sc := new(scratch)
		u.rouge(sc, pred, ref)
		if sc.sqFused {
			fused++
		}
	}
	if fused < 2500 {
		t.Fatalf("only %d of 5000 pairs fused", fused)
	}
}

// TestRealTextOracles: on clips of real CAsT answers and KB passages with
// non-ASCII characters, and their retrieved content, every scorer gives the
// oracles' SQuAD EM and F1, Rouge-L, EM and Hit, and most unicode pairs
// take the fused path.
func TestRealTextOracles(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): scores every real-text pair with every scorer against the oracles")
	}
	pairs, ctxs := realPairs(t, true)
	scorers := fastPathScorers(t)
	fused, hits := 0, 0
	for i, p := range pairs {
		for _, s := range scorers {
			checkSeparatorPaths(t, []*Scorer{s}, p[0], p[1])
			g := s.Score(p[0], p[1], ctxs[i])
			if w := s.Score(p[0], p[1], nil); g.RougeF1 != w.RougeF1 || g.SquadF1 != w.SquadF1 {
				t.Fatalf("context changes the scores: %+v, %+v", g, w)
			}
			norm := s.Normalize
			if !s.unicode {
				norm = generalSQuAD
			}
			hit := 0.0
			for _, c := range ctxs[i] {
				if a := norm(p[0]); a != "" && strings.Contains(" "+norm(c)+" ", " "+a+" ") {
					hit = 1
				}
			}
			if g.Hit != hit {
				t.Fatalf("%+v: (%q, %q): Hit %v, want %v", s.cfg, p[0], p[1], g.Hit, hit)
			}
			hits += int(hit)
		}
		sc := new(scratch)
		scorers[0].rouge(sc, p[0], p[1])
		if sc.sqFused {
			fused++
		}
	}
	if fused < len(pairs)*3/4 {
		t.Fatalf("%d of %d real pairs fused", fused, len(pairs))
	}
	if hits < len(pairs) {
		t.Fatalf("only %d hits", hits) // the clips come from the chunks: most hit
	}
	t.Logf("%d of %d real non-ASCII pairs fused, %d hits", fused, len(pairs), hits)
}
