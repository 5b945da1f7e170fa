package memory

import (
	"fmt"
	"math"
	"strings"

	"github.com/himes-rl/himes/internal/fielderr"
)

// Config configures HiMeS long-term memory (activation and re-ranking).
type Config struct {
	// Enabled turns HiMeS long-term memory on: activation of the user's past queries and memory-aware re-ranking.
	Enabled bool `yaml:"enabled"`
	// TopN historical queries activated (H_n).
	TopN int `yaml:"top_n"`
	// Partitions is an optional Parquet file of memories built by
	// `himes memory build`; without it, memory starts empty (the training loop
	// attaches one built from conversations).
	Partitions string `yaml:"partitions"`
	// Taxonomy is an optional ATM taxonomy YAML; "" uses the shipped default.
	Taxonomy string `yaml:"taxonomy"`
	// Classifier is "embedding" (nearest label description, default) or
	// "ollama" (an LLM constrained to the taxonomy's labels by a JSON schema).
	Classifier string `yaml:"classifier"`
	// ClassifierURL and ClassifierModel configure the "ollama" classifier.
	ClassifierURL   string `yaml:"classifier_url"`
	ClassifierModel string `yaml:"classifier_model"`
	// MinPartition is the number of memories below which activation widens
	// to neighbouring partitions (default 5).
	MinPartition int `yaml:"min_partition"`
	// RetrievalWeight fuses the retrieval score into re-ranking:
	// (1−w)·mean memory similarity + w·min–max normalized retrieval score.
	// 0 is the HiMeS paper's setting (pure mean-similarity re-rank), which
	// on the dev sets lowers NDCG@3; the default was chosen on CAsT
	// 2020–2022 and MTRAG so that memory never lowers R@10 or NDCG@3 there.
	RetrievalWeight float64 `yaml:"retrieval_weight"`
	// RerankFloor: the activated memories re-rank only when the most similar
	// of them has at least this cosine with the query; below it the
	// retrieval order stands (memories unrelated to the question must not
	// reorder its passages). 0 with retrieval_weight 0 is the paper's
	// always-re-rank.
	RerankFloor float64 `yaml:"rerank_floor"`
	// RecencyHalfLife is the recency signal's half-life in questions: a
	// question asked that many questions before the current one scores 0.5
	// (default 3).
	RecencyHalfLife float64 `yaml:"recency_half_life"`
	// Signals weight the activation score of each memory (see
	// memory.Score); 0 turns a signal off.
	Signals Signals `yaml:"signals"`
	// ActivateWith is the text that activates memories: "question", the
	// user's question as asked (the default: long-term memory sees the raw
	// query, as HiMeS describes it), or "rewrite", the rewriter's output (a
	// self-contained query: on "what about the second one?" it names the
	// thing asked about); an empty rewrite falls back to the question.
	ActivateWith string `yaml:"activate_with"`
	// Sources are the memories activation may pick: "all" (default), "facts"
	// (the user's statements, data.memory_field, and memories without a
	// question position) or "questions" (the user's earlier questions). On
	// iKAT the relevance labels are on statements, and earlier questions,
	// never labelled, crowd them out of the top n (docs/EMBEDDINGS.md).
	Sources string `yaml:"sources"`
	// Fusion fuses a lexical score with the activation score (cosine and
	// the other signals) over a turn's visible memories: "none" (default),
	// "rrf" (reciprocal-rank fusion with BM25, fusion_k) or "linear"
	// ((1−lexical_weight)·minmax(score) + lexical_weight·minmax(BM25)).
	// BM25 (k1 0.9, b 0.4, english analyzer) has its document frequencies
	// over all memories of the store. The activated memory's sim stays
	// the cosine, so rerank_floor means what it did.
	Fusion string `yaml:"fusion"`
	// FusionK is the k of fusion rrf (default 60).
	FusionK float64 `yaml:"fusion_k"`
	// LexicalWeight is BM25's weight λ in fusion linear (default 0.3).
	LexicalWeight float64 `yaml:"lexical_weight"`
	// Embedder embeds the memories, the activating text and the candidates
	// they re-rank: "" (default) is retrieval.embedder; hash, lsa, ollama
	// or e5 give the memory its own space, e.g. a dense MiniLM first stage
	// with an LSA memory fitted on the knowledge base (docs/EMBEDDINGS.md).
	Embedder string `yaml:"embedder"`
}

// The memory kinds activation may pick (Config.Sources).
const (
	SourcesAll       = "all"
	SourcesFacts     = "facts"
	SourcesQuestions = "questions"
)

// admits reports whether sources lets a memory with question position seq
// (0: a fact) be activated.
func admits(sources string, seq int64) bool {
	switch sources {
	case SourcesFacts:
		return seq == 0
	case SourcesQuestions:
		return seq > 0
	}
	return true
}

// The texts a memory can be activated with (Config.ActivateWith).
const (
	ActivateWithQuestion = "question"
	ActivateWithRewrite  = "rewrite"
)

// Signals are the weights of the activation score's terms. All zero
// means semantic 1: HiMeS's cosine alone.
type Signals struct {
	// Semantic weights the cosine of the memory with the query (default 1).
	Semantic float64 `yaml:"semantic"`
	// Topic weights the taxonomy match: 1 for the query's topic and
	// subtopic, 0.5 for its topic alone.
	Topic float64 `yaml:"topic"`
	// Recency weights 0.5^(age/recency_half_life) for earlier questions
	// (facts carry no age and score 0).
	Recency float64 `yaml:"recency"`
	// Importance weights the memory's importance in [0, 1].
	Importance float64 `yaml:"importance"`
	// Entities weights the share of the memory's entities (content words
	// when none are given) that occur in the query.
	Entities float64 `yaml:"entities"`
}

// Validate checks the weights are finite and non-negative.
func (s Signals) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"semantic", s.Semantic}, {"topic", s.Topic}, {"recency", s.Recency}, {"importance", s.Importance}, {"entities", s.Entities}} {
		if !(f.v >= 0) || math.IsInf(f.v, 1) {
			return fielderr.New(f.name, "must be a finite weight ≥ 0, got %v", f.v)
		}
	}
	return nil
}

// The default fusion of memory and retrieval (see Config), chosen on
// the dev sets (README, "Long-term memory").
const (
	DefaultRetrievalWeight = 0.9
	DefaultRerankFloor     = 0.3
)

// maxTopN bounds top_n: far above real use, so that a typo fails validation
// instead of exhausting memory.
const maxTopN = 100_000

// DefaultConfig returns the defaults: memory off; when on, the top 5
// memories by cosine, classified by embedding, re-ranking with the fusion
// chosen on the dev sets.
func DefaultConfig() Config {
	return Config{Enabled: false, TopN: 5, Classifier: "embedding", MinPartition: 5,
		ClassifierURL: "http://localhost:11434", ClassifierModel: "llama3.2",
		RetrievalWeight: DefaultRetrievalWeight, RerankFloor: DefaultRerankFloor, RecencyHalfLife: 3,
		Signals: Signals{Semantic: 1}, ActivateWith: ActivateWithQuestion, Sources: SourcesAll,
		Fusion: FusionNone, FusionK: 60, LexicalWeight: 0.3}
}

// Validate checks the memory section.
func (m Config) Validate() error {
	if m.TopN < 0 || m.TopN > maxTopN {
		return fielderr.New("top_n", "must be in [0, %d], got %d", maxTopN, m.TopN)
	}
	if m.Enabled && m.TopN == 0 {
		return fielderr.New("top_n", "must be ≥ 1 when memory is enabled")
	}
	switch m.Classifier {
	case "embedding":
	case "ollama":
		if m.ClassifierURL == "" || m.ClassifierModel == "" {
			return fielderr.New("classifier_model", "classifier ollama needs classifier_url and classifier_model")
		}
	default:
		return fielderr.New("classifier", "must be embedding or ollama, got %q", m.Classifier)
	}
	if m.MinPartition < 0 {
		return fielderr.New("min_partition", "must be ≥ 0, got %d", m.MinPartition)
	}
	switch m.Fusion {
	case FusionNone, FusionRRF, FusionLinear:
	default:
		return fielderr.New("fusion", "must be none, rrf or linear, got %q", m.Fusion)
	}
	if !(m.FusionK > 0) || math.IsInf(m.FusionK, 1) {
		return fielderr.New("fusion_k", "must be > 0, got %v", m.FusionK)
	}
	if !(m.LexicalWeight >= 0 && m.LexicalWeight <= 1) {
		return fielderr.New("lexical_weight", "must be in [0, 1], got %v", m.LexicalWeight)
	}
	if m.RetrievalWeight < 0 || m.RetrievalWeight > 1 {
		return fielderr.New("retrieval_weight", "must be in [0, 1], got %v", m.RetrievalWeight)
	}
	if m.RerankFloor < -1 || m.RerankFloor > 1 || math.IsNaN(m.RerankFloor) {
		return fielderr.New("rerank_floor", "must be a cosine in [-1, 1], got %v", m.RerankFloor)
	}
	if !(m.RecencyHalfLife > 0) || math.IsInf(m.RecencyHalfLife, 1) {
		return fielderr.New("recency_half_life", "must be > 0 questions, got %v", m.RecencyHalfLife)
	}
	if err := m.Signals.Validate(); err != nil {
		return fielderr.Prefix("signals", err)
	}
	if m.ActivateWith != "" && m.ActivateWith != ActivateWithQuestion && m.ActivateWith != ActivateWithRewrite { // "" = question
		return fielderr.New("activate_with", "must be %s or %s, got %q", ActivateWithQuestion, ActivateWithRewrite, m.ActivateWith)
	}
	switch m.Sources {
	case "", SourcesAll, SourcesFacts, SourcesQuestions: // "" = all
	default:
		return fielderr.New("sources", "must be %s, %s or %s, got %q", SourcesAll, SourcesFacts, SourcesQuestions, m.Sources)
	}
	return nil
}

// Variants are the named variants Config.Variant knows, for
// ablations (`himes eval --memory on:<variant>`).
var Variants = []string{"paper", "semantic", "+topic", "+recency", "+importance", "+entities",
	"no-semantic", "no-topic", "no-recency", "no-importance", "no-entities"}

// Variant returns the memory settings of a named ablation variant:
//
//	paper        HiMeS as published: cosine activation, pure mean-similarity
//	             re-rank (retrieval_weight 0, no floor)
//	semantic     cosine activation alone, this config's re-rank
//	+<signal>    semantic 1 plus <signal> at its configured weight (1 if 0)
//	no-<signal>  this config's weights with <signal> off
//
// signals: semantic, topic, recency, importance, entities.
func (m Config) Variant(name string) (Config, error) {
	v := m
	if v.Signals == (Signals{}) {
		v.Signals.Semantic = 1
	}
	weight := func(sig *Signals, signal string) (*float64, bool) {
		switch signal {
		case "semantic":
			return &sig.Semantic, true
		case "topic":
			return &sig.Topic, true
		case "recency":
			return &sig.Recency, true
		case "importance":
			return &sig.Importance, true
		case "entities":
			return &sig.Entities, true
		}
		return nil, false
	}
	switch {
	case name == "paper":
		v.Signals, v.RetrievalWeight, v.RerankFloor = Signals{Semantic: 1}, 0, 0
	case name == "semantic":
		v.Signals = Signals{Semantic: 1}
	case strings.HasPrefix(name, "+"):
		w, ok := weight(&v.Signals, name[1:])
		if !ok || name == "+semantic" {
			return m, fmt.Errorf("memory variant %q: want one of %s", name, strings.Join(Variants, ", "))
		}
		conf := *w
		if conf == 0 {
			conf = 1
		}
		v.Signals = Signals{Semantic: 1}
		w, _ = weight(&v.Signals, name[1:])
		*w = conf
	case strings.HasPrefix(name, "no-"):
		w, ok := weight(&v.Signals, name[3:])
		if !ok {
			return m, fmt.Errorf("memory variant %q: want one of %s", name, strings.Join(Variants, ", "))
		}
		*w = 0
		if v.Signals == (Signals{}) {
			return m, fmt.Errorf("memory variant %q: no signal left on", name)
		}
	default:
		return m, fmt.Errorf("memory variant %q: want one of %s", name, strings.Join(Variants, ", "))
	}
	return v, nil
}
