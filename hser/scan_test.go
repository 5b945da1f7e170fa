package hser

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// scanText draws ASCII text for the scan: words of 1–70 bytes, gaps of
// punctuation and every kind of whitespace (runs up to 150 bytes, so that
// gaps and words cross 64-byte blocks), now and then a control character.
func scanText(r *rand.Rand, control bool) string {
	const alnum = "aZ09xQ"
	const punct = ".,'_-!@[`{~/"
	const space = " \t\n\v\f\r\x1c\x1d\x1e\x1f"
	var b []byte
	for range r.IntN(30) {
		n := 1 + r.IntN(8)
		if r.IntN(8) == 0 {
			n = 10 + r.IntN(60)
		}
		for range n {
			b = append(b, alnum[r.IntN(len(alnum))])
		}
		gap := 1 + r.IntN(3)
		if r.IntN(10) == 0 {
			gap = 60 + r.IntN(90)
		}
		for range gap {
			switch r.IntN(3) {
			case 0:
				b = append(b, space[r.IntN(len(space))])
			default:
				b = append(b, punct[r.IntN(len(punct))])
			}
		}
		if r.IntN(6) == 0 { // glued words, no gap
			b = append(b[:len(b)-gap], '\'')
		}
	}
	s := string(b)
	s = s[r.IntN(len(s)+1):]
	if control && len(s) > 0 {
		i := r.IntN(len(s))
		s = s[:i] + string([]byte{"\x00\x01\x08\x0e\x1b\x7f"[r.IntN(6)]}) + s[i:]
	}
	return s
}

// TestScanTokensAndFields: the scan's tokens are the runs of ASCII letters
// and digits, and a token's field bit is set exactly when Python whitespace
// lies between it and the token before (or the text's start), checked byte
// by byte; text with a control character is flagged, non-ASCII text
// refused.
func TestScanTokensAndFields(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	var a asciiScan
	for i := range 20000 {
		ctl := i%7 == 0
		text := scanText(r, ctl)
		buf := padText([]byte(text))
		n, ascii, control := a.scan(buf)
		if !ascii {
			t.Fatalf("%q: ASCII text refused", text)
		}
		if hasControl(buf) && !control {
			t.Fatalf("%q: control character not flagged", text)
		}
		k, prevEnd := 0, 0
		for p := 0; p < len(text); {
			if !asciiAlnum[text[p]] {
				p++
				continue
			}
			q := p
			for q < len(text) && asciiAlnum[text[q]] {
				q++
			}
			if k >= n || int(a.tok[k].start) != p || int(a.tok[k].end) != q {
				t.Fatalf("%q: token %d is not [%d, %d)", text, k, p, q)
			}
			space := false
			for _, c := range []byte(text[prevEnd:p]) {
				space = space || squadClass[c] == squadSpace
			}
			if !ctl && (a.tok[k].field == 1) != space {
				t.Fatalf("%q: token %d %q: field bit %d, whitespace before it %v", text, k, text[p:q], a.tok[k].field, space)
			}
			k, prevEnd, p = k+1, q, q
		}
		if k != n {
			t.Fatalf("%q: %d tokens, want %d", text, n, k)
		}
	}
	for _, s := range []string{"é", "abc\xff", strings.Repeat("x", 100) + "\x80"} {
		if _, ascii, _ := a.scan(padText([]byte(s))); ascii {
			t.Errorf("%q accepted as ASCII", s)
		}
	}
}

// TestSQuADFusedLongText: SQuAD EM and F1 from the fused path equal the
// official script's on long texts whose fields and gaps cross 64-byte
// blocks, for both tokenizers.
func TestSQuADFusedLongText(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, cfg := range []Config{DefaultConfig(), rougeCfg(false)} {
		s := mustScorer(t, cfg)
		fused := 0
		for i := range 5000 {
			pred, ref := scanText(r, i%11 == 0), scanText(r, false)
			if i%4 == 0 {
				ref = pred + " " + ref[:len(ref)/2]
			}
			wantEM, wantF1 := refSQuAD(pred, ref)
			g := s.Score(pred, ref, nil)
			if !same(g.SquadEM, wantEM) || !same(g.SquadF1, wantF1) {
				t.Fatalf("%s: Score(%q, %q): squad EM %v F1 %v, want %v %v", cfg.Tokenizer, pred, ref, g.SquadEM, g.SquadF1, wantEM, wantF1)
			}
			sc := new(scratch)
			s.rouge(sc, pred, ref)
			if sc.sqFused {
				fused++
			}
		}
		if fused < 4000 {
			t.Fatalf("%s: only %d of 5000 pairs took the fused path", cfg.Tokenizer, fused)
		}
	}
}

// FuzzSQuADPaths: on any input, Score's SQuAD EM and F1 are the official
// script's, bit for bit, whichever path computed them.
func FuzzSQuADPaths(f *testing.F) {
	fuzzSeeds(f)
	f.Add("Don't t.h.e 2,000 e.g.", "dont the 2000 eg")
	f.Add(strings.Repeat("ab-cd ", 12)+"x\ty", "abcd\x1cx y")
	scorers := []*Scorer{mustScorer(f, DefaultConfig()), mustScorer(f, rougeCfg(false))}
	f.Fuzz(func(t *testing.T, pred, ref string) {
		wantEM, wantF1 := refSQuAD(pred, ref)
		for _, s := range scorers {
			g := s.Score(pred, ref, nil)
			if !same(g.SquadEM, wantEM) || !same(g.SquadF1, wantF1) {
				t.Fatalf("%s: (%q, %q): squad EM %v F1 %v, want %v %v", s.cfg.Tokenizer, pred, ref, g.SquadEM, g.SquadF1, wantEM, wantF1)
			}
		}
	})
}
