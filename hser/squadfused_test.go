package hser

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// refSQuAD is the official script's exact_match_score and f1_score, step by
// step: the general normalize_answer (the Python steps one by one), split,
// Counter overlap.
func refSQuAD(pred, ref string) (em, f1 float64) {
	var tmp []byte
	np := string(appendSQuADNormalizedGeneral(nil, pred, &tmp))
	nr := string(appendSQuADNormalizedGeneral(nil, ref, &tmp))
	if np == nr {
		em = 1
	}
	pt, rt := strings.Fields(np), strings.Fields(nr)
	count := map[string]int{}
	for _, w := range rt {
		count[w]++
	}
	same := 0
	for _, w := range pt {
		if count[w] > 0 {
			count[w]--
			same++
		}
	}
	if same == 0 {
		return em, 0
	}
	p := float64(same) / float64(len(pt))
	r := float64(same) / float64(len(rt))
	return em, 2 * p * r / (p + r)
}

// squadText draws ASCII answers with what the fused path must get right:
// articles (also spelled with punctuation inside, "t.h-e"), words glued by
// punctuation ("don't", "2,000", "e.g."), punctuation-only fields, every
// kind of whitespace, long words, repeats, and now and then a control
// character (which the general path must take).
func squadText(r *rand.Rand, control bool) string {
	words := []string{"the", "The", "a", "A", "an", "AN", "t.h.e", "a_n", "don't", "2,000", "e.g.", "U.S.A",
		"rock-and-roll", "Paris", "paris", "PARIS", "1889", "x", "i", "internationalization", "antidisestablishmentarianism!",
		"(the)", "--", "...", "_", "''", "an-", "-a", "thE", "Eiffel's", "42nd", "café"[:3]}
	seps := []string{" ", "  ", "\t", "\n", "\r\n", "\v", "\f", "\x1c", "\x1f", " - ", ", ", ". ", ""}
	var b strings.Builder
	for range r.IntN(25) {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteString(seps[r.IntN(len(seps))])
	}
	if control {
		s := b.String()
		i := r.IntN(len(s) + 1)
		c := []string{"\x00", "\x01", "\x1b", "\x7f", "\b"}[r.IntN(5)]
		return s[:i] + c + s[i:]
	}
	return b.String()
}

func TestSQuADFusedPath(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): scores 20,000 random texts per config against the oracles")
	}
	for _, cfg := range []Config{DefaultConfig(), rougeCfg(false)} {
		s := mustScorer(t, cfg)
		r := rand.New(rand.NewPCG(16, 5))
		fused := 0
		for i := range 20000 {
			pred, ref := squadText(r, i%17 == 0), squadText(r, i%19 == 0)
			if i%5 == 0 {
				ref = pred // exact matches and F1 1
			}
			var ctx []string
			if i%3 == 0 {
				ctx = []string{squadText(r, false) + " " + pred + " " + squadText(r, false), squadText(r, i%2 == 0)}
			}
			wantEM, wantF1 := refSQuAD(pred, ref)
			g := s.Score(pred, ref, ctx)
			if g.SquadEM != wantEM || g.SquadF1 != wantF1 {
				t.Fatalf("%s: Score(%q, %q): squad EM %v F1 %v, want %v %v", cfg.Tokenizer, pred, ref, g.SquadEM, g.SquadF1, wantEM, wantF1)
			}
			if cfg.Tokenizer == TokenizerRougeScore {
				// The reward's EM and Hit are SQuAD's normalization here.
				var tmp []byte
				ans := string(appendSQuADNormalizedGeneral(nil, pred, &tmp))
				hit := 0.0
				for _, c := range ctx {
					if ans != "" && strings.Contains(" "+string(appendSQuADNormalizedGeneral(nil, c, &tmp))+" ", " "+ans+" ") {
						hit = 1
					}
				}
				if g.EM != wantEM || g.Hit != hit {
					t.Fatalf("rouge-score: Score(%q, %q, %q): EM %v Hit %v, want %v %v", pred, ref, ctx, g.EM, g.Hit, wantEM, hit)
				}
			}
			// Which path: without control characters, the fused one.
			sc := new(scratch)
			s.rouge(sc, pred, ref)
			ok := sc.sqFused
			if control := strings.ContainsAny(pred+ref, "\x00\x01\x1b\x7f\b"); ok == control {
				t.Fatalf("%s: (%q, %q): fused path %v with control characters %v", cfg.Tokenizer, pred, ref, ok, control)
			}
			if ok {
				fused++
			}
		}
		if fused < 17000 {
			t.Fatalf("%s: only %d of 20000 pairs took the fused path", cfg.Tokenizer, fused)
		}
	}
}
