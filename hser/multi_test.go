package hser

import (
	"math"
	"testing"
)

// Several references, by hand: "the tower" against
//
//	"tower":          Rouge-L LCS 1: P 1/2, R 1, F 2/3; EM 1 (articles dropped); SQuAD F1 1
//	"the tower here": Rouge-L LCS 2: P 1, R 2/3, F 4/5; EM 0; SQuAD F1 2·1·½/1.5 = 2/3
//
// rouge-score's score_multi keeps the reference with the best F (the second:
// P 1, R 2/3, F .8), SQuAD takes EM and F1 each at their best (1, 1), and
// the reward combines the maxima: .8 + α·1 + β·hit.
func TestScoreMultiTakesTheBestReferencePerMetric(t *testing.T) {
	s, err := NewScorer(Config{Weights: Weights{Alpha: 1, Beta: 0.5}, Tokenizer: "unicode", Hit: "gold"})
	if err != nil {
		t.Fatal(err)
	}
	got := s.ScoreMulti("the tower", []string{"tower", "the tower here"}, []string{"a view of the tower here"})
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"rougeL_p", got.RougeP, 1}, {"rougeL_r", got.RougeR, 2.0 / 3}, {"rougeL_f1", got.RougeF1, 0.8},
		{"em", got.EM, 1}, {"squad_f1", got.SquadF1, 1},
		{"hit (gold: the second reference is in the context)", got.Hit, 1},
		{"reward", got.Reward, 0.8 + 1 + 0.5},
	} {
		if math.Abs(c.got-c.want) > 1e-12 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// One reference is Score; the order of equal-F references keeps the first.
	one := s.ScoreMulti("the tower", []string{"tower"}, nil)
	if one != s.Score("the tower", "tower", nil) {
		t.Errorf("one reference: %+v, Score gives %+v", one, s.Score("the tower", "tower", nil))
	}
	// "paris france" vs "france" (P ½, R 1) and "paris is in france" (P 1, R ½): F ties at 2/3.
	tie := s.ScoreMulti("paris france", []string{"france", "paris is in france"}, nil)
	if tie.RougeP != 0.5 || tie.RougeR != 1 {
		t.Errorf("F tie: P %v R %v, want the first reference's ½ and 1 (np.argmax)", tie.RougeP, tie.RougeR)
	}
	if none := s.ScoreMulti("x", nil, nil); none != s.Score("x", "", nil) {
		t.Errorf("no reference: %+v", none)
	}
}
