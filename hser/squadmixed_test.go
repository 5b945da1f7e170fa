package hser

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
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
