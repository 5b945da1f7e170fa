package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/trainer"
)

// coStats are hand-set knowledge-base counts over 100 documents.
type coStats struct {
	df map[string]int
	co map[[2]string]int
}

func (s coStats) IDF(string) float64 { return 0 }
func (s coStats) DF(t string) int    { return s.df[t] }
func (s coStats) NumDocs() int       { return 100 }
func (s coStats) CoDF(a, b string) int {
	if a > b {
		a, b = b, a
	}
	return s.co[[2]string{a, b}]
}

func bronzeCoStats() coStats {
	return coStats{
		df: map[string]int{"caused": 10, "collapse": 5, "bronze": 8, "age": 20, "civilizations": 4},
		co: map[[2]string]int{
			{"bronze", "collapse"}: 4, // with "caused": never
			{"age", "collapse"}:    5, {"age", "caused"}: 2,
			{"civilizations", "collapse"}: 1, {"caused", "civilizations"}: 1,
		},
	}
}

func TestCooccurrenceFeaturesByHand(t *testing.T) {
	cands, _ := candidates(contextOf(bronze()), bronzeCoStats(), 32)
	byTerm := map[string]candidate{}
	for _, c := range cands {
		byTerm[c.term] = c
	}
	// NPMI = log(p(a,b)/(p(a)p(b))) / −log p(a,b) with N = 100:
	// bronze·collapse: log(0.04/(0.08·0.05))/−log 0.04 = log 10/log 25; bronze·caused never: −1.
	// age·collapse: log 5/log 20; age·caused: log(0.02/(0.2·0.1)) = 0.
	// civilizations·collapse: log 5/log 100; ·caused: log 2.5/log 100.
	bronzeMax := math.Log(10) / math.Log(25)
	ageMax := math.Log(5) / math.Log(20)
	civMax := math.Log(5) / math.Log(100)
	for _, c := range []struct {
		term                 string
		inKB, max, mean, gap float64
	}{
		{"bronze", 1, bronzeMax, (bronzeMax - 1) / 2, 0},
		{"age", 1, ageMax, ageMax / 2, ageMax - bronzeMax},
		{"civilizations", 1, civMax, (civMax + math.Log(2.5)/math.Log(100)) / 2, civMax - bronzeMax},
		{"fell", 0, -1, -1, -1 - bronzeMax}, // unknown to the KB: never co-occurs
	} {
		phi := byTerm[c.term].phi
		near(t, c.term+" in_kb", phi[featInKB], c.inKB)
		near(t, c.term+" npmi_max", phi[featNPMIMax], c.max)
		near(t, c.term+" npmi_mean", phi[featNPMIMean], c.mean)
		near(t, c.term+" npmi_gap", phi[featNPMIGap], c.gap)
	}
	// The gap is relative to the best of all candidates, also under a cap
	// that cuts the best one ("bronze" ranks third): a capped list must be a
	// prefix of the full one, features included, or a truncated sample
	// would be scored on other features than it was drawn with.
	capped, truncated := candidates(contextOf(bronze()), bronzeCoStats(), 1)
	if !truncated || len(capped) != 1 || capped[0] != cands[0] {
		t.Errorf("cap 1: %+v, want the full list's first candidate %+v", capped, cands[0])
	}
}

func TestQuestionFeatures(t *testing.T) {
	p := bronze()
	p.Dialogue.Question = "Why did it fall?" // content word: fall; anaphor: it
	cands, _ := candidates(contextOf(p), nil, 32)
	for _, c := range cands {
		near(t, c.term+" question_content_words", c.phi[featQContent], 0.2)
		near(t, c.term+" question_anaphor", c.phi[featQAnaphor], 1)
	}
	// Without co-occurrence statistics the association features are 0.
	for _, c := range cands {
		if c.phi[featInKB] != 0 || c.phi[featNPMIMax] != 0 || c.phi[featNPMIMean] != 0 || c.phi[featNPMIGap] != 0 {
			t.Errorf("%s: association features without statistics: %v", c.term, c.phi)
		}
	}
}

func TestOneLetterRunsAreNotCandidates(t *testing.T) {
	p := trainer.Prompt{Dialogue: &trainer.Dialogue{
		History:  []trainer.Message{{Role: "user", Content: "The U.S. economy in â 1990s"}},
		Question: "How did it grow?",
	}}
	cands, _ := candidates(contextOf(p), nil, 32)
	var terms []string
	for _, c := range cands {
		terms = append(terms, c.term)
	}
	if strings.Join(terms, ",") != "economy,1990s" {
		t.Errorf("candidates %v, want [economy 1990s]", terms)
	}
}

func TestWeightedBCE(t *testing.T) {
	s := 1 / (1 + math.Exp(-0.7)) // σ(0.7)
	for _, c := range []struct {
		z, y, pos, loss, dz float64
	}{
		{0, 1, 1, math.Ln2, -0.5},
		{0, 0, 1, math.Ln2, 0.5},
		{0, 1, 5, 5 * math.Ln2, -2.5},
		{0, 0, 5, math.Ln2, 0.5}, // the weight touches only the keep class
		{0.7, 1, 3, -3 * math.Log(s), 3 * (s - 1)},
		{0.7, 0, 3, -math.Log(1 - s), s},
	} {
		l, d := weightedBCE(c.z, c.y, c.pos)
		near(t, "loss", l, c.loss)
		near(t, "dz", d, c.dz)
	}
}

func TestSFTPosWeightScalesKeepTerms(t *testing.T) {
	cfg := trainer.DefaultEmbeddedConfig()
	cfg.CheckpointDir = t.TempDir()
	cfg.SFTPosWeight = 5
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// bronze has 10 candidates; "bronze", "age" and "late" are in the
	// completion. At zero weights each term costs log 2, the kept ones 5·log 2.
	res, err := e.SFTStep(context.Background(), trainer.SFTRequest{StepID: "s", LearningRate: 0.1,
		Examples: []trainer.SFTExample{{Prompt: bronze(), Completion: "What caused the Late Bronze Age collapse?"}}})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "loss", res.Loss, (3*5+7)*math.Ln2/10)
	if res.Tokens != 10 {
		t.Errorf("tokens %d, want 10", res.Tokens)
	}
	cfg.SFTPosWeight = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "sft_pos_weight") {
		t.Errorf("sft_pos_weight 0: %v", err)
	}
}

// A checkpoint of the 11-feature policy (before the association and
// question features) is refused, naming the field, not loaded into a
// policy with other features.
func TestLoadRefusesOtherFeatureSet(t *testing.T) {
	e := newTestEmbedded(t, nil)
	old := []string{"bias", "log_tf", "idf", "recency", "in_user_turn", "in_assistant_turn",
		"capitalized", "in_first_turn", "in_last_user_turn", "is_number", "log_len"}
	w := make([]float64, len(old))
	raw, err := json.Marshal(map[string]any{"format": checkpointFormatV1, "features": old, "policy_version": 3,
		"weights": w, "adam_m": w, "adam_v": w, "adam_t": 3, "reference": nil})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.cfg.CheckpointDir, "old.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = e.Load(context.Background(), trainer.LoadRequest{StepID: "l", Name: "old"})
	var pe *trainer.Error
	if !errors.As(err, &pe) || !strings.Contains(pe.Message, "old.json: field features") || !strings.Contains(pe.Message, "npmi_max_question") {
		t.Errorf("old checkpoint: %v", err)
	}
	if e.st.version != 0 {
		t.Errorf("version %d after a refused load", e.st.version)
	}
}

func TestInfoNamesWeights(t *testing.T) {
	e := newTestEmbedded(t, nil)
	e.st.w[featNPMIGap] = 0.25
	info, err := e.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w, ok := info.Adapter["weights"].(map[string]float64)
	if !ok || len(w) != numFeatures || w["npmi_gap_to_best"] != 0.25 || w["bias"] != 0 {
		t.Errorf("info weights %v", info.Adapter["weights"])
	}
	if s := e.NamedWeights(); !strings.HasPrefix(s, "bias=+0.000 log_tf=+0.000") || !strings.HasSuffix(s, "npmi_gap_to_best=+0.250 from_memory=+0.000") {
		t.Errorf("NamedWeights = %q", s)
	}
}
