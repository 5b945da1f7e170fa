package rlcore

import (
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"

	"github.com/himes-rl/himes/internal/words"
)

// The guards' one-pass helpers against the straightforward definitions they
// replace, on random text over an alphabet of letters, digits, spaces,
// punctuation and a few non-ASCII characters.
func refNormalizeWords(s string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}), " ")
}

// distinctWordSet is the set of normalized words of s.
func distinctWordSet(s string) map[string]bool {
	set := map[string]bool{}
	for _, w := range strings.Fields(refNormalizeWords(s)) {
		set[w] = true
	}
	return set
}

func refCopiesHistory(rewrite string, hist map[string]bool) bool {
	if len(hist) < CopyMinWords {
		return false
	}
	in := 0
	for w := range distinctWordSet(rewrite) {
		if hist[w] {
			in++
		}
	}
	return float64(in) >= CopyCoverage*float64(len(hist))
}

func randomText(r *rand.Rand, ascii bool) string {
	alpha := []string{"a", "b", "c", "Ab", "Z", "1", "9", " ", " ", "  ", "-", ".", "\t", "\n", "'", "ab", "ba"}
	if !ascii {
		alpha = append(alpha, "É", "ß", "İ", "Σ", "—", "’", "\u00a0", "é1")
	}
	var b strings.Builder
	for range r.IntN(40) {
		b.WriteString(alpha[r.IntN(len(alpha))])
	}
	return b.String()
}

func TestGuardHelpersMatchDefinitions(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): checks 20,000 random cases against the definitions")
	}
	r := rand.New(rand.NewPCG(1, 2))
	copies := 0
	for i := range 20000 {
		s, n := randomText(r, i%2 == 0), randomText(r, i%3 == 0)
		got, want := words.Normalize(s), refNormalizeWords(s)
		if got != want {
			t.Fatalf("words.Normalize(%q) = %q, want %q", s, got, want)
		}
		h, nn := words.Normalize(s), words.Normalize(n)
		if g, w := NormalizedWordCount(h), len(strings.Fields(h)); g != w {
			t.Fatalf("NormalizedWordCount(%q) = %d, want %d", h, g, w)
		}
		if nn != "" {
			if g, w := ContainsWords(h, nn), strings.Contains(" "+h+" ", " "+nn+" "); g != w {
				t.Fatalf("ContainsWords(%q, %q) = %v, want %v", h, nn, g, w)
			}
		}
		if g, w := ContainsWords(s, n), strings.Contains(" "+s+" ", " "+n+" "); g != w {
			t.Fatalf("ContainsWords(%q, %q) = %v, want %v", s, n, g, w)
		}
		histText := randomText(r, true) + " " + randomText(r, false) + " a b c ab ba z 1 9 ab1 x y"
		hist := distinctWordSet(histText)
		rw := strings.Repeat(n+" ", 1+r.IntN(3)) + s
		if i%4 == 0 { // copies (nearly) the whole history
			rw = s + " " + strings.ToUpper(histText[r.IntN(4):])
		}
		hw := HistoryWords([]string{s, n, histText})
		ref := distinctWordSet(s + " " + n + " " + histText)
		if !maps.Equal(hw, ref) {
			t.Fatalf("HistoryWords(%q, %q, %q) = %v, want %v", s, n, histText, hw, ref)
		}
		g, w := copiesHistory(words.Normalize(rw), hist), refCopiesHistory(rw, hist)
		if g != w {
			t.Fatalf("copiesHistory(%q, %v) = %v, want %v", rw, hist, g, w)
		}
		if w {
			copies++
		}
	}
	if copies < 1000 {
		t.Fatalf("only %d of the random rewrites copy the history: the test does not exercise both outcomes", copies)
	}
}
