package hser

import (
	"math"

	"github.com/himes-rl/himes/internal/fielderr"
)

// Weights are the reward's coefficients: R = RougeL_F1 + Alpha·EM + Beta·Hit
// (HSER), plus Rank·RankReward when the rank term is on.
type Weights struct {
	// Alpha weighs exact match (EM) in the reward.
	Alpha float64 `yaml:"alpha" json:"alpha"`
	// Beta weighs Hit (the answer — or, with hit "gold", the reference —
	// occurs in the retrieved content).
	Beta float64 `yaml:"beta" json:"beta"`
	// Rank weighs ConvSearch-R1's rank-incentive retrieval reward (RankReward
	// of the first relevant passage's rank in the rewrite's passage ranking,
	// against the turn's judgments): R = HSER + Rank·RankReward. 0 (default)
	// leaves the HSER reward as it is; > 0 needs judged turns (qrels).
	Rank float64 `yaml:"rank" json:"rank"`
	// RougeL weighs Rouge-L F1 in R; null (default) is 1, HSER's R. 0 drops
	// the answer's Rouge-L from R, so that a pure retrieval reward (e.g.
	// R = NDCG@3 + Recall@10: rouge_l 0, alpha 0, beta 0, ndcg and recall
	// weight 1) can be written. A pointer so that a Weights literal that
	// leaves it out keeps HSER's R rather than silently dropping Rouge-L.
	RougeL *float64 `yaml:"rouge_l" json:"rouge_l,omitempty"`
}

// RougeLWeight is the weight of Rouge-L F1 in R: RougeL, or 1 when unset.
func (w Weights) RougeLWeight() float64 {
	if w.RougeL == nil {
		return 1
	}
	return *w.RougeL
}

// Config is the reward's configuration (the "reward" section of a run config).
type Config struct {
	Weights `yaml:",inline"`
	// Tokenizer is "unicode" (default) or "rouge-score" (bit-exact with
	// Google's rouge-score). It also sets the normalization of the reward's
	// EM and Hit: unicode tokens without articles, or SQuAD v1.1's. The
	// squad_em and squad_f1 metrics always use SQuAD v1.1's.
	Tokenizer string `yaml:"tokenizer" json:"tokenizer"`
	// Stem applies NLTK's Porter stemmer to tokens longer than 3 characters,
	// as rouge-score's use_stemmer does; with the unicode tokenizer only to
	// tokens made of ASCII letters and digits. It affects Rouge-L only, never
	// EM, the SQuAD metrics or Hit. Default false.
	Stem bool `yaml:"stem" json:"stem"`
	// Hit is "answer" (the predicted answer occurs in the retrieved content, the
	// paper's definition) or "gold" (the reference answer occurs in it).
	Hit string `yaml:"hit" json:"hit"`
	// Recall is Recall@k (trec_eval's recall_k) of the rollout's own passage
	// ranking against the turn's judgments, a reward term with its weight:
	// R = HSER + rank·RankReward + recall.weight·Recall@k + ndcg.weight·NDCG@k
	// + rr.weight·RR. Weight 0 (default) leaves R as it is; > 0 needs judged
	// turns (qrels), as reward.rank does. Default k 10.
	Recall RetrievalTerm `yaml:"recall" json:"recall"`
	// NDCG is NDCG@k (trec_eval's ndcg_cut_k, linear gain) of the rollout's
	// ranking, weighted as Recall. Default k 3.
	NDCG RetrievalTerm `yaml:"ndcg" json:"ndcg"`
	// RR is the reciprocal rank of the first relevant passage in the
	// rollout's ranking (trec_eval's recip_rank; k is unused), weighted as
	// Recall.
	RR RetrievalTerm `yaml:"rr" json:"rr"`
}

// RetrievalTerm is one retrieval reward term: its weight in R and its
// cutoff k.
type RetrievalTerm struct {
	// Weight of the term in R (≥ 0; 0 leaves it out).
	Weight float64 `yaml:"weight" json:"weight"`
	// K is the rank cutoff (≥ 1; 0 takes the default, 10 for recall and 3
	// for ndcg); unused by rr.
	K int `yaml:"k" json:"k,omitempty"`
}

// cutoff is t's k, or def when unset.
func (t RetrievalTerm) cutoff(def int) int {
	if t.K > 0 {
		return t.K
	}
	return def
}

// RecallCutoff is reward.recall.k, or its default when unset.
func (c Config) RecallCutoff() int { return c.Recall.cutoff(DefaultRecallK) }

// NDCGCutoff is reward.ndcg.k, or its default when unset.
func (c Config) NDCGCutoff() int { return c.NDCG.cutoff(DefaultNDCGK) }

// Default cutoffs of reward.recall.k and reward.ndcg.k.
const (
	DefaultRecallK = 10
	DefaultNDCGK   = 3
)

// Retrieval reports whether a retrieval term (rank, recall, ndcg or rr)
// enters R: then every prompt turn needs relevance judgments.
func (c Config) Retrieval() bool {
	return c.Rank != 0 || c.Recall.Weight != 0 || c.NDCG.Weight != 0 || c.RR.Weight != 0
}

// RetrievalTerms names the retrieval terms that enter R, as reward keys
// (reward.rank, reward.recall, ...), for the refusal of unjudged turns.
func (c Config) RetrievalTerms() []string {
	var out []string
	for _, t := range []struct {
		name string
		w    float64
	}{{"reward.rank", c.Rank}, {"reward.recall", c.Recall.Weight}, {"reward.ndcg", c.NDCG.Weight}, {"reward.rr", c.RR.Weight}} {
		if t.w != 0 {
			out = append(out, t.name)
		}
	}
	return out
}

// DefaultConfig returns the paper's reward with α = β = 1.
func DefaultConfig() Config {
	return Config{Weights: Weights{Alpha: 1, Beta: 1}, Tokenizer: "unicode", Hit: "answer",
		Recall: RetrievalTerm{K: DefaultRecallK}, NDCG: RetrievalTerm{K: DefaultNDCGK}}
}

// Validate rejects weights that are negative or not finite and unknown modes.
func (c Config) Validate() error {
	for _, w := range []struct {
		name string
		v    float64
	}{{"alpha", c.Alpha}, {"beta", c.Beta}, {"rank", c.Rank}, {"rouge_l", c.RougeLWeight()},
		{"recall.weight", c.Recall.Weight}, {"ndcg.weight", c.NDCG.Weight}, {"rr.weight", c.RR.Weight}} {
		if math.IsNaN(w.v) || math.IsInf(w.v, 0) || w.v < 0 {
			return fielderr.New(w.name, "must be a finite number ≥ 0, got %v", w.v)
		}
	}
	for _, t := range []struct {
		name string
		k    int
	}{{"recall.k", c.Recall.K}, {"ndcg.k", c.NDCG.K}} {
		if t.k < 0 {
			return fielderr.New(t.name, "must be ≥ 1 (0: the default), got %d", t.k)
		}
	}
	if c.RougeLWeight() == 0 && c.Alpha == 0 && c.Beta == 0 && !c.Retrieval() {
		return fielderr.New("rouge_l", "0 with alpha, beta and every retrieval weight 0 leaves R = 0 for every rollout: nothing to learn")
	}
	switch c.Tokenizer {
	case "unicode", "rouge-score":
	default:
		return fielderr.New("tokenizer", "must be \"unicode\" or \"rouge-score\", got %q", c.Tokenizer)
	}
	switch c.Hit {
	case "answer", "gold":
	default:
		return fielderr.New("hit", "must be \"answer\" or \"gold\", got %q", c.Hit)
	}
	return nil
}

// Normalizations of the reward's EM (Config.EMNormalization).
const (
	// NormSQuAD is SQuAD v1.1's normalize_answer (rouge-score tokenizer).
	NormSQuAD = "squad"
	// NormUnicode is the unicode tokens without the articles a, an, the
	// (unicode tokenizer): words in every script, "2,000" ≠ "2000".
	NormUnicode = "unicode"
)

// EMNormalization names the normalization of the reward's EM and Hit under
// this config: NormSQuAD with the rouge-score tokenizer, NormUnicode with
// the unicode one. Score.SquadEM and SquadF1 are always SQuAD's.
func (c Config) EMNormalization() string {
	if c.Tokenizer == TokenizerRougeScore {
		return NormSQuAD
	}
	return NormUnicode
}

// EMLabel is the human label of the reward's EM under this config, naming
// its normalization so that it is never mistaken for SQuAD EM.
func (c Config) EMLabel() string {
	if c.EMNormalization() == NormSQuAD {
		return "EM (reward, SQuAD norm.)"
	}
	return "EM (reward, unicode norm.)"
}

// Hit modes accepted by Config.Hit.
const (
	HitAnswer = "answer"
	HitGold   = "gold"
)
