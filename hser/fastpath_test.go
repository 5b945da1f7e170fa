package hser

import (
	"bufio"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// randomASCII draws text that stresses the fast path: mixed case, digits,
// punctuation, control bytes, words of 1–20 bytes, and long runs that cross
// 8- and 64-byte boundaries.
func randomASCII(r *rand.Rand) string {
	const alpha = "abcXYZ019yies"
	const seps = " .,'_-\t\n\x00\x1f\x7f@[`{"
	var b strings.Builder
	for range r.IntN(40) {
		n := 1 + r.IntN(6)
		switch r.IntN(10) {
		case 0:
			n = 8 + r.IntN(13)
		case 1:
			n = 60 + r.IntN(10)
		}
		for range n {
			b.WriteByte(alpha[r.IntN(len(alpha))])
		}
		for range 1 + r.IntN(2) {
			b.WriteByte(seps[r.IntN(len(seps))])
		}
	}
	s := b.String()
	return s[r.IntN(len(s)+1):] // sometimes start or end inside a word
}

// fastTokens runs the fast path's scan, pack and intern on pred and ref as
// Score does and returns the token strings and ids of each side.
func fastTokens(pred, ref string) (pt, rt []string, pid, rid []int32) {
	var a asciiScan
	var tab internTable
	text, split := fillText(nil, pred, ref)
	n, ascii, _ := a.scan(text)
	if !ascii {
		panic("ASCII text reported as non-ASCII")
	}
	buf := growBuf(nil, text)
	np := 0
	for np < n && int(a.tok[np].start) < split {
		np++
	}
	tab.reset(n)
	for i := range a.tok[:n] {
		a.tok[i].field = 1 // no SQuAD fields: only the tokens' own ids
	}
	pid, _, buf = tab.internTokens(nil, nil, &a, text, buf, 0, np)
	rid, _, buf = tab.internTokens(nil, nil, &a, text, buf, np, n)
	// A token's text is that of its id's first occurrence.
	for _, id := range pid {
		k := tab.keys[id]
		pt = append(pt, string(buf[k.start:k.end]))
	}
	for _, id := range rid {
		k := tab.keys[id]
		rt = append(rt, string(buf[k.start:k.end]))
	}
	return pt, rt, pid, rid
}

// TestASCIIFastPathTokens: on ASCII text, the fused tokenizer-interner gives
// exactly the tokens of both general tokenizers, and ids that are equal
// exactly when the tokens are, numbered in order of first occurrence.
func TestASCIIFastPathTokens(t *testing.T) {
	uni, rouge := mustScorer(t, DefaultConfig()), mustScorer(t, rougeCfg(false))
	r := rand.New(rand.NewPCG(3, 4))
	cases := [][2]string{{"", ""}, {"a", ""}, {"", "The"}}
	for n := range 140 { // a word ending at every offset around 8- and 64-byte boundaries
		cases = append(cases, [2]string{strings.Repeat("Ab", n)[:n], strings.Repeat("x", n) + " y"})
	}
	for range 3000 {
		cases = append(cases, [2]string{randomASCII(r), randomASCII(r)})
	}
	for _, c := range cases {
		pt, rt, pid, rid := fastTokens(c[0], c[1])
		for _, s := range []*Scorer{uni, rouge} {
			if want := s.Tokens(c[0]); !slices.Equal(pt, want) && len(pt)+len(want) > 0 {
				t.Fatalf("%s: fast tokens of %q = %q, want %q", s.cfg.Tokenizer, c[0], pt, want)
			}
			if want := s.Tokens(c[1]); !slices.Equal(rt, want) && len(rt)+len(want) > 0 {
				t.Fatalf("%s: fast tokens of %q = %q, want %q", s.cfg.Tokenizer, c[1], rt, want)
			}
		}
		seen := map[string]int32{}
		for i, tok := range append(pt, rt...) {
			id := append(pid, rid...)[i]
			want, ok := seen[tok]
			if !ok {
				want = int32(len(seen))
				seen[tok] = want
			}
			if id != want {
				t.Fatalf("(%q, %q): token %d %q has id %d, want %d", c[0], c[1], i, tok, id, want)
			}
		}
	}
}

// slowRouge is Rouge-L from the general tokenizer (Scorer.Tokens) and the
// textbook LCS: an independent oracle for Score's fast path.
func slowRouge(s *Scorer, pred, ref string) (p, r, f float64) {
	pt, rt := s.Tokens(pred), s.Tokens(ref)
	if len(pt) == 0 || len(rt) == 0 {
		return 0, 0, 0
	}
	ids := map[string]int32{}
	toIDs := func(ts []string) []int32 {
		var out []int32
		for _, tok := range ts {
			if _, ok := ids[tok]; !ok {
				ids[tok] = int32(len(ids))
			}
			out = append(out, ids[tok])
		}
		return out
	}
	lcs := lcsDP(toIDs(pt), toIDs(rt))
	p, r = float64(lcs)/float64(len(pt)), float64(lcs)/float64(len(rt))
	if p+r > 0 {
		f = 2 * p * r / (p + r)
	}
	return p, r, f
}

func fastPathScorers(t testing.TB) []*Scorer {
	stemU := DefaultConfig()
	stemU.Stem = true
	var out []*Scorer
	for _, cfg := range []Config{DefaultConfig(), rougeCfg(false), rougeCfg(true), stemU} {
		out = append(out, mustScorer(t, cfg))
	}
	return out
}

// TestASCIIFastPathScores: Rouge-L from the fast path equals, to the bit,
// Rouge-L computed from the general tokenizer with the textbook LCS.
func TestASCIIFastPathScores(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range fastPathScorers(t) {
		for range 2000 {
			pred, ref := randomASCII(r), randomASCII(r)
			if r.IntN(4) == 0 {
				ref = pred[:r.IntN(len(pred)+1)] + randomASCII(r)
			}
			got := s.Score(pred, ref, nil)
			if p, rr, f := slowRouge(s, pred, ref); !same(got.RougeP, p) || !same(got.RougeR, rr) || !same(got.RougeF1, f) {
				t.Fatalf("%+v (%q, %q): rouge %v %v %v, want %v %v %v", s.cfg, pred, ref, got.RougeP, got.RougeR, got.RougeF1, p, rr, f)
			}
		}
	}
}

// FuzzRougePaths: on any input Score's Rouge-L equals the general
// tokenizer's with the textbook LCS, for every tokenizer and stemming mode.
func FuzzRougePaths(f *testing.F) {
	fuzzSeeds(f)
	scorers := fastPathScorers(f)
	f.Fuzz(func(t *testing.T, pred, ref string) {
		for _, s := range scorers {
			got := s.Score(pred, ref, nil)
			if p, r, f := slowRouge(s, pred, ref); !same(got.RougeP, p) || !same(got.RougeR, r) || !same(got.RougeF1, f) {
				t.Fatalf("%+v (%q, %q): rouge %v %v %v, want %v %v %v", s.cfg, pred, ref, got.RougeP, got.RougeR, got.RougeF1, p, r, f)
			}
		}
	})
}

// TestInternFields: the fields internFields finds are those of a split on
// ' ' (empty ones dropped), for any bytes, with ids equal exactly when the
// fields are.
func TestInternFields(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const alphabet = "ab \x00\xff\xc3\xa9 X"
	for range 3000 {
		var parts [2]string
		for k := range parts {
			b := make([]byte, r.IntN(150))
			for i := range b {
				b[i] = alphabet[r.IntN(len(alphabet))]
			}
			parts[k] = string(b)
		}
		var tab internTable
		text := withTextSlack([]byte(parts[0] + parts[1]))
		tab.reset(len(text)/2 + 2)
		var buf []byte
		var ids []int32
		ids, buf = tab.internFields(ids, buf, text, 0, len(parts[0]))
		ids, buf = tab.internFields(ids, buf, text, len(parts[0]), len(text))
		var want []string
		for _, p := range parts {
			want = append(want, strings.FieldsFunc(p, func(r rune) bool { return r == ' ' })...)
		}
		// FieldsFunc decodes UTF-8, but splitting on ' ' is the same on bytes.
		var got []string
		for _, id := range ids {
			k := tab.keys[id]
			got = append(got, string(buf[k.start:k.end]))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("fields of %q = %q, want %q", parts, got, want)
		}
		for i := range got {
			for j := range got {
				if (got[i] == got[j]) != (ids[i] == ids[j]) {
					t.Fatalf("fields %q %q have ids %d %d", got[i], got[j], ids[i], ids[j])
				}
			}
		}
	}
}

// TestASCIIFastPathStems: with stemming, the fast path's ids are those of
// NLTK's stems for every word of the NLTK vocabulary (each twice, capitalized
// and not, so the second comes from the memo and the memo's sets are evicted
// and refilled): equal ids exactly for equal stems, numbered in order of
// first occurrence.
func TestASCIIFastPathStems(t *testing.T) {
	f, err := os.Open("testdata/porter_nltk.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var text strings.Builder
	var want []int32
	ids := map[string]int32{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		word, stem, ok := strings.Cut(sc.Text(), "\t")
		if !ok || strings.HasPrefix(word, "#") {
			continue
		}
		text.WriteString(strings.ToUpper(word[:1]) + word[1:] + ", " + word + " ")
		if _, ok := ids[stem]; !ok {
			ids[stem] = int32(len(ids))
		}
		want = append(want, ids[stem], ids[stem])
	}
	s := mustScorer(t, rougeCfg(true))
	var scr scratch
	s.rouge(&scr, text.String(), "")
	if !slices.Equal(scr.predID, want) {
		t.Fatalf("stem ids differ from NLTK's stems (%d ids, want %d)", len(scr.predID), len(want))
	}
}

// TestSeparatorsBlanked: every character appendSeparatorsBlanked accepts is
// a pure separator for both general tokenizers, next to ASCII words and
// between them (so NFC neither turns it into a letter nor composes it with
// a neighbour). All assigned punctuation, symbols, spaces and controls are
// checked, and a sample of the unassigned and private-use code points.
func TestSeparatorsBlanked(t *testing.T) {
	scorers := []*Scorer{mustScorer(t, DefaultConfig()), mustScorer(t, rougeCfg(false))}
	checked := 0
	for r := rune(0x80); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		assigned := unicode.In(r, unicode.P, unicode.S, unicode.Z, unicode.Cc, unicode.Cf)
		if !assigned && r%97 != 0 {
			continue
		}
		c := string(r)
		if _, ok := appendSeparatorsBlanked(nil, c); !ok {
			continue
		}
		checked++
		for _, s := range scorers {
			for _, tc := range []struct {
				in   string
				want []string
			}{{"ab" + c + "cd", []string{"ab", "cd"}}, {c + "x", []string{"x"}}, {"x" + c, []string{"x"}}, {"é" + c, []string{"é"}}} {
				if s.unicode || tc.in[0] != "é"[0] {
					if got := s.Tokens(tc.in); !slices.Equal(got, tc.want) {
						t.Fatalf("%s: Tokens(%q) (U+%04X) = %q, want %q", s.cfg.Tokenizer, tc.in, r, got, tc.want)
					}
				}
			}
		}
	}
	for _, r := range []rune{'’', '“', '—', '…', '\u00a0', '\u1fee', '\u2000', '\u037e'} { // common and decomposing ones
		if _, ok := appendSeparatorsBlanked(nil, string(r)); !ok {
			t.Errorf("U+%04X not accepted as a separator", r)
		}
	}
	for _, s := range []string{"é", "北", "\u0301", "\u212a", "\u0130", "x\xffy", "٣"} {
		if _, ok := appendSeparatorsBlanked(nil, s); ok {
			t.Errorf("%q accepted as separators only", s)
		}
	}
	if checked < 8000 {
		t.Fatalf("only %d characters checked", checked)
	}
}

// TestBlankedSeparatorScores: text with non-ASCII separators (fast path
// after blanking) or non-ASCII letters (general path) scores as the general
// tokenizer with the textbook LCS says.
func TestBlankedSeparatorScores(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	pieces := []string{"the", "Don", "t", "RUNNING", "runs", "42", " ", " ", "’", "“", "—", "…", "\u1fee", "\u00a0", ".", "café", "\u212a"}
	text := func() string {
		var b strings.Builder
		for range r.IntN(20) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		return b.String()
	}
	for _, s := range fastPathScorers(t) {
		for range 2000 {
			pred, ref := text(), text()
			got := s.Score(pred, ref, nil)
			if p, rr, f := slowRouge(s, pred, ref); !same(got.RougeP, p) || !same(got.RougeR, rr) || !same(got.RougeF1, f) {
				t.Fatalf("%+v (%q, %q): rouge %v %v %v, want %v %v %v", s.cfg, pred, ref, got.RougeP, got.RougeR, got.RougeF1, p, rr, f)
			}
		}
	}
}
