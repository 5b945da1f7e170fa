package service

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/himes-rl/himes/internal/fielderr"

	"gopkg.in/yaml.v3"
)

// RemoteConfig configures a retrieval service speaking Search-R1's protocol:
// POST /retrieve {"queries", "topk", "return_scores"}.
type RemoteConfig struct {
	Call Config `yaml:",inline"`
	// TokenEnv names the environment variable holding the bearer token of
	// a `himes retrieval serve --token` ("": no authentication).
	TokenEnv string `yaml:"token_env"`
}

// ElasticConfig configures an Elasticsearch or OpenSearch index. Documents
// are ranked by the index's own similarity (BM25 with the k1 and b of the
// index settings, not retrieval.k1/b), one match query per rewrite.
type ElasticConfig struct {
	Call Config `yaml:",inline"`
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

// Config is how a retrieval service is called: its hosts, batching,
// the per-call timeout and the retries (the same HTTP layer as the responder).
type Config struct {
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

// DefaultConfig is the default call policy of a retrieval service.
func DefaultConfig() Config {
	return Config{MaxPerHost: 4, MaxBatch: 64, Timeout: 30 * time.Second, Retries: 3,
		BackoffBase: 200 * time.Millisecond, BackoffMax: 5 * time.Second}
}

// Validate checks the hosts and the call policy.
func (s Config) Validate() error {
	if len(s.URL) == 0 {
		return fielderr.New("url", "required: the service's host(s), e.g. http://127.0.0.1:8000")
	}
	for i, h := range s.URL {
		if err := checkURL(h); err != nil {
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

func checkURL(s string) error {
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
