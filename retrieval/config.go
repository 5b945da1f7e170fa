package retrieval

import (
	"fmt"
	"math"
	"net/url"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/himes-rl/himes/internal/fielderr"
)

// Config is the "retrieval" section of a run config. The retrieval package owns it.
type Config struct {
	// Method is "bm25" (embedded default), "dense" or "hybrid" (BM25 + dense
	// fused by reciprocal rank fusion) over the embedded index; "remote" (a
	// retrieval service speaking Search-R1's /retrieve protocol, e.g. `himes
	// retrieval serve`; see retrieval/PROTOCOL.md) or "elasticsearch" (an
	// Elasticsearch/OpenSearch index searched by _msearch) for a KB held
	// elsewhere. With the last two, data.kb is optional: when set, returned
	// ids are checked against it and its statistics feed the embedded policy.
	Method string `yaml:"method"`
	// TopK chunks handed to the responder after re-ranking.
	TopK int `yaml:"top_k"`
	// Candidates retrieved by the first stage before re-ranking.
	Candidates int `yaml:"candidates"`
	// K1 is BM25 term-frequency saturation (Lucene formula; Pyserini default 0.9).
	K1 float64 `yaml:"k1"`
	// B is BM25 length normalization in [0, 1] (Pyserini default 0.4).
	B float64 `yaml:"b"`
	// Analyzer is "plain" (default: lowercase [a-z0-9] runs, the reference
	// numbers' tokenization), "english" (plus Snowball stopwords and
	// stemming) or "lucene-english" (Pyserini's default analyzer: Lucene's
	// StandardTokenizer, possessive and lowercase filters, Lucene's 33
	// English stopwords, the original Porter stemmer).
	Analyzer string `yaml:"analyzer"`
	// Scoring is "exact" (default: Lucene's BM25 formula in float64, exact
	// document lengths, a repeated query term counted once) or "lucene"
	// (what Lucene/Pyserini compute: float32, one-byte length norms, a
	// repeated query term weighted by its count, ties by ascending id).
	Scoring string `yaml:"scoring"`
	// ChunkWords and ChunkStride set the word windows; 0 means one chunk per passage.
	ChunkWords  int `yaml:"chunk_words"`
	ChunkStride int `yaml:"chunk_stride"`
	// Index is an optional path to a persisted index built by `himes index build`
	// (index.bin, loaded into memory with the KB), or by `himes index build
	// --disk` (index.disk: memory-mapped, chunk texts read from it, the KB
	// never loaded).
	Index string `yaml:"index"`
	// Embedder is "hash" (embedded default: feature hashing, lexical),
	// "lsa" (latent semantic analysis fitted on the knowledge base in Go:
	// semantic, no service; persisted with the index by `himes index build`)
	// or "ollama".
	Embedder string       `yaml:"embedder"`
	Memory   MemoryConfig `yaml:"memory"`

	// HashDim is the hashing embedder's dimension (default 1024).
	HashDim int `yaml:"hash_dim"`
	// LSADim is the LSA embedder's dimension: singular vectors kept (default 64; on the iKAT dev labels 64 recalled more than 128 or 256).
	LSADim int `yaml:"lsa_dim"`
	// LSAMinDF drops terms in fewer knowledge-base chunks from the LSA
	// vocabulary (default 2).
	LSAMinDF int `yaml:"lsa_min_df"`
	// OllamaURL is the Ollama server for the "ollama" embedder.
	OllamaURL string `yaml:"ollama_url"`
	// EmbedModel is the Ollama embedding model (default nomic-embed-text).
	EmbedModel string `yaml:"embed_model"`
	// EmbedBatch is the number of texts per /api/embed request (default 32).
	EmbedBatch int `yaml:"embed_batch"`
	// EmbedCache is the on-disk embedding cache directory for the Ollama
	// embedder; "" means <user cache dir>/himes/embed, "off" disables it.
	EmbedCache string `yaml:"embed_cache"`
	// RRFK is the k of reciprocal rank fusion for "hybrid" (default 60).
	RRFK float64 `yaml:"rrf_k"`
	// Remote configures method "remote": the retrieval service's hosts and how it is called.
	Remote RemoteConfig `yaml:"remote"`
	// Elasticsearch configures method "elasticsearch": the cluster, the index and its fields.
	Elasticsearch ElasticConfig `yaml:"elasticsearch"`
}

// RemoteConfig configures a retrieval service speaking Search-R1's protocol:
// POST /retrieve {"queries", "topk", "return_scores"}.
type RemoteConfig struct {
	Call ServiceConfig `yaml:",inline"`
}

// ElasticConfig configures an Elasticsearch or OpenSearch index. Documents
// are ranked by the index's own similarity (BM25 with the k1 and b of the
// index settings, not retrieval.k1/b), one match query per rewrite.
type ElasticConfig struct {
	Call ServiceConfig `yaml:",inline"`
	// Index is the index (or alias) searched.
	Index string `yaml:"index"`
	// TextField is the document field searched and handed to the responder
	// (default "contents", Pyserini's field). Without a title field, a value
	// whose first line is a quoted title is split into title and text, as
	// Search-R1 does.
	TextField string `yaml:"text_field"`
	// TitleField is an optional field holding the title ("": none, or the quoted first line of the text field).
	TitleField string `yaml:"title_field"`
	// IDField is an optional keyword field holding each document's id
	// (`himes index push` writes "id"): equal scores are then ordered by
	// ascending id, as the embedded index orders them, instead of by Lucene
	// document number, which differs between a shard's primary and replica.
	IDField string `yaml:"id_field"`
	// SearchType is "query_then_fetch" (default: each shard scores with its
	// own BM25 statistics) or "dfs_query_then_fetch" (the statistics are
	// gathered over every shard first, one more round trip, so an index of
	// several shards ranks as one shard would).
	SearchType string `yaml:"search_type"`
	// APIKeyEnv names the environment variable holding an API key sent as
	// "Authorization: ApiKey <key>" ("": no authentication).
	APIKeyEnv string `yaml:"api_key_env"`
}

// ServiceConfig is how a retrieval service is called: its hosts, batching,
// the per-call timeout and the retries (the same HTTP layer as the responder).
type ServiceConfig struct {
	// URL lists the service's hosts (http[s]://host:port[/prefix], one string or a list); each request goes to the least-loaded host.
	URL HostList `yaml:"url"`
	// MaxPerHost bounds in-flight requests per host (default 4).
	MaxPerHost int `yaml:"max_per_host"`
	// MaxBatch is the most queries in one request (default 64): a step's distinct rewrites go out in batches of this size.
	MaxBatch int `yaml:"max_batch"`
	// Timeout of one HTTP call (default 30s).
	Timeout time.Duration `yaml:"timeout"`
	// Retries after the first attempt on connection errors, timeouts, 429 and
	// 5xx (default 3); other 4xx and malformed responses are not retried.
	Retries int `yaml:"retries"`
	// BackoffBase and BackoffMax bound the exponential backoff with jitter (defaults 200ms and 5s).
	BackoffBase time.Duration `yaml:"backoff_base"`
	BackoffMax  time.Duration `yaml:"backoff_max"`
}

// HostList is a list of service URLs; YAML accepts one string or a list.
type HostList []string

// UnmarshalYAML accepts a scalar (one host) or a sequence of hosts.
func (h *HostList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		if n.Tag == "!!null" {
			*h = nil
			return nil
		}
		*h = HostList{n.Value}
		return nil
	}
	var l []string
	if err := n.Decode(&l); err != nil {
		return err
	}
	*h = l
	return nil
}

// DefaultServiceConfig is the default call policy of a retrieval service.
func DefaultServiceConfig() ServiceConfig {
	return ServiceConfig{MaxPerHost: 4, MaxBatch: 64, Timeout: 30 * time.Second, Retries: 3,
		BackoffBase: 200 * time.Millisecond, BackoffMax: 5 * time.Second}
}

// UsesService reports whether the method is served outside the process (no embedded index).
func (c Config) UsesService() bool { return c.Method == MethodRemote || c.Method == MethodElastic }

// Method names of the retrieval services.
const (
	MethodRemote  = "remote"
	MethodElastic = "elasticsearch"
)

// Validate checks the hosts and the call policy.
func (s ServiceConfig) Validate() error {
	if len(s.URL) == 0 {
		return fielderr.New("url", "required: the service's host(s), e.g. http://127.0.0.1:8000")
	}
	for i, h := range s.URL {
		if err := checkServiceURL(h); err != nil {
			return fielderr.New("url", "host %d: %v", i+1, err)
		}
	}
	if s.MaxPerHost < 1 {
		return fielderr.New("max_per_host", "must be ≥ 1, got %d", s.MaxPerHost)
	}
	if s.MaxBatch < 1 {
		return fielderr.New("max_batch", "must be ≥ 1, got %d", s.MaxBatch)
	}
	if s.Timeout <= 0 {
		return fielderr.New("timeout", "must be > 0, got %v", s.Timeout)
	}
	if s.Retries < 0 {
		return fielderr.New("retries", "must be ≥ 0, got %d", s.Retries)
	}
	if s.BackoffBase <= 0 || s.BackoffMax < s.BackoffBase {
		return fielderr.New("backoff_max", "need 0 < backoff_base (%v) ≤ backoff_max (%v)", s.BackoffBase, s.BackoffMax)
	}
	return nil
}

func checkServiceURL(s string) error {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: want an http:// or https:// URL", s)
	}
	if u.Host == "" {
		return fmt.Errorf("%q: no host", s)
	}
	return nil
}

// Validate checks the Elasticsearch section.
func (e ElasticConfig) Validate() error {
	if err := e.Call.Validate(); err != nil {
		return err
	}
	if strings.TrimSpace(e.Index) == "" || strings.ContainsAny(e.Index, "/?# ") {
		return fielderr.New("index", "must name one index or alias (no '/', '?', '#' or spaces), got %q", e.Index)
	}
	if e.TextField == "" {
		return fielderr.New("text_field", "is required (the field searched and handed to the responder)")
	}
	if e.SearchType != "" && e.SearchType != "query_then_fetch" && e.SearchType != "dfs_query_then_fetch" {
		return fielderr.New("search_type", "must be query_then_fetch or dfs_query_then_fetch, got %q", e.SearchType)
	}
	if e.APIKeyEnv != "" {
		if v, ok := os.LookupEnv(e.APIKeyEnv); !ok || v == "" {
			return fielderr.New("api_key_env", "environment variable %s is not set", e.APIKeyEnv)
		}
	}
	return nil
}

// MemoryConfig configures HiMeS long-term memory (activation and re-ranking).
type MemoryConfig struct {
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
	// retrieval.MemoryScore); 0 turns a signal off.
	Signals MemorySignals `yaml:"signals"`
}

// MemorySignals are the weights of the activation score's terms. All zero
// means semantic 1: HiMeS's cosine alone.
type MemorySignals struct {
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
func (s MemorySignals) Validate() error {
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

// The default fusion of memory and retrieval (see MemoryConfig), chosen on
// the dev sets (README, "Long-term memory").
const (
	DefaultRetrievalWeight = 0.9
	DefaultRerankFloor     = 0.3
)

// maxCandidates bounds top_k, candidates and memory.top_n: far above real
// use, so that a typo fails validation instead of exhausting memory.
const maxCandidates = 100_000

// DefaultConfig returns the embedded defaults (Pyserini's BM25 parameters).
func DefaultConfig() Config {
	return Config{Method: "bm25", TopK: 3, Candidates: 20, K1: 0.9, B: 0.4, Analyzer: AnalyzerPlain, Scoring: ScoringExact, Embedder: "hash",
		HashDim: 1024, LSADim: 64, LSAMinDF: 2, OllamaURL: "http://localhost:11434", EmbedModel: "nomic-embed-text", EmbedBatch: 32, RRFK: 60,
		Remote:        RemoteConfig{Call: DefaultServiceConfig()},
		Elasticsearch: ElasticConfig{Call: DefaultServiceConfig(), TextField: "contents", SearchType: "query_then_fetch"},
		Memory: MemoryConfig{Enabled: false, TopN: 5, Classifier: "embedding", MinPartition: 5,
			ClassifierURL: "http://localhost:11434", ClassifierModel: "llama3.2",
			RetrievalWeight: DefaultRetrievalWeight, RerankFloor: DefaultRerankFloor, RecencyHalfLife: 3,
			Signals: MemorySignals{Semantic: 1}}}
}

// Validate checks ranges and modes.
func (c Config) Validate() error {
	switch c.Method {
	case "bm25", "dense", "hybrid":
	case MethodRemote:
		if err := c.Remote.Call.Validate(); err != nil {
			return fielderr.Prefix("remote", err)
		}
	case MethodElastic:
		if err := c.Elasticsearch.Validate(); err != nil {
			return fielderr.Prefix("elasticsearch", err)
		}
	default:
		return fielderr.New("method", "must be bm25, dense, hybrid, remote or elasticsearch, got %q", c.Method)
	}
	if c.TopK < 1 || c.TopK > maxCandidates {
		return fielderr.New("top_k", "must be in [1, %d], got %d", maxCandidates, c.TopK)
	}
	if c.Candidates < c.TopK || c.Candidates > maxCandidates {
		return fielderr.New("candidates", "must be in [top_k=%d, %d], got %d", c.TopK, maxCandidates, c.Candidates)
	}
	if c.K1 < 0 {
		return fielderr.New("k1", "must be ≥ 0, got %v", c.K1)
	}
	if c.B < 0 || c.B > 1 {
		return fielderr.New("b", "must be in [0, 1], got %v", c.B)
	}
	if _, err := NewAnalyzer(c.Analyzer); err != nil {
		return fielderr.New("analyzer", "must be plain, english or lucene-english, got %q", c.Analyzer)
	}
	if c.Scoring != ScoringExact && c.Scoring != ScoringLucene {
		return fielderr.New("scoring", "must be exact or lucene, got %q", c.Scoring)
	}
	if c.ChunkWords < 0 {
		return fielderr.New("chunk_words", "must be ≥ 0, got %d", c.ChunkWords)
	}
	if c.ChunkWords > 0 && (c.ChunkStride < 1 || c.ChunkStride > c.ChunkWords) {
		return fielderr.New("chunk_stride", "must be in [1, chunk_words=%d], got %d", c.ChunkWords, c.ChunkStride)
	}
	switch c.Embedder {
	case "hash":
		if c.HashDim < 2 || c.HashDim > 1<<20 {
			return fielderr.New("hash_dim", "must be in [2, %d], got %d", 1<<20, c.HashDim)
		}
	case "lsa":
		if c.LSADim < 1 {
			return fielderr.New("lsa_dim", "must be ≥ 1, got %d", c.LSADim)
		}
		if c.LSAMinDF < 1 {
			return fielderr.New("lsa_min_df", "must be ≥ 1, got %d", c.LSAMinDF)
		}
	case "ollama":
		if c.OllamaURL == "" {
			return fielderr.New("ollama_url", "required for embedder ollama")
		}
		if c.EmbedModel == "" {
			return fielderr.New("embed_model", "required for embedder ollama")
		}
	default:
		return fielderr.New("embedder", "must be hash, lsa or ollama, got %q", c.Embedder)
	}
	if c.EmbedBatch < 1 || c.EmbedBatch > 4096 {
		return fielderr.New("embed_batch", "must be in [1, 4096], got %d", c.EmbedBatch)
	}
	if c.RRFK <= 0 {
		return fielderr.New("rrf_k", "must be > 0, got %v", c.RRFK)
	}
	if err := c.Memory.Validate(); err != nil {
		return fielderr.Prefix("memory", err)
	}
	return nil
}

// Validate checks the memory section.
func (m MemoryConfig) Validate() error {
	if m.TopN < 0 || m.TopN > maxCandidates {
		return fielderr.New("top_n", "must be in [0, %d], got %d", maxCandidates, m.TopN)
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
	return nil
}

// MemoryVariants are the named variants MemoryConfig.Variant knows, for
// ablations (`himes eval --memory on:<variant>`).
var MemoryVariants = []string{"paper", "semantic", "+topic", "+recency", "+importance", "+entities",
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
func (m MemoryConfig) Variant(name string) (MemoryConfig, error) {
	v := m
	if v.Signals == (MemorySignals{}) {
		v.Signals.Semantic = 1
	}
	weight := func(sig *MemorySignals, signal string) (*float64, bool) {
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
		v.Signals, v.RetrievalWeight, v.RerankFloor = MemorySignals{Semantic: 1}, 0, 0
	case name == "semantic":
		v.Signals = MemorySignals{Semantic: 1}
	case strings.HasPrefix(name, "+"):
		w, ok := weight(&v.Signals, name[1:])
		if !ok || name == "+semantic" {
			return m, fmt.Errorf("memory variant %q: want one of %s", name, strings.Join(MemoryVariants, ", "))
		}
		conf := *w
		if conf == 0 {
			conf = 1
		}
		v.Signals = MemorySignals{Semantic: 1}
		w, _ = weight(&v.Signals, name[1:])
		*w = conf
	case strings.HasPrefix(name, "no-"):
		w, ok := weight(&v.Signals, name[3:])
		if !ok {
			return m, fmt.Errorf("memory variant %q: want one of %s", name, strings.Join(MemoryVariants, ", "))
		}
		*w = 0
		if v.Signals == (MemorySignals{}) {
			return m, fmt.Errorf("memory variant %q: no signal left on", name)
		}
	default:
		return m, fmt.Errorf("memory variant %q: want one of %s", name, strings.Join(MemoryVariants, ", "))
	}
	return v, nil
}
