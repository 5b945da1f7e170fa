package rollout

import (
	"strings"
	"time"

	"github.com/himes-rl/himes/internal/httpcall"

	"github.com/himes-rl/himes/internal/fielderr"
)

// Config is the "rollout" section: the responder and how rollouts fan out.
type Config struct {
	// Responder is "extractive" (embedded default), "ollama" or "openai".
	Responder string `yaml:"responder"`
	// Concurrency bounds in-flight rollouts overall (default 16).
	Concurrency int          `yaml:"concurrency"`
	Ollama      OllamaConfig `yaml:"ollama"`
	// OpenAI configures an OpenAI-compatible chat endpoint (vLLM, SGLang,
	// llama.cpp server, Ollama's /v1) when Responder is "openai".
	OpenAI     OpenAIConfig     `yaml:"openai"`
	Extractive ExtractiveConfig `yaml:"extractive"`
	// Prompt is the chat prompt the model responders render (not the extractive one).
	Prompt PromptConfig `yaml:"prompt"`
	// Dedup answers identical normalized rewrites of the same turn once per step (default true).
	Dedup bool `yaml:"dedup"`
	// CacheSize bounds the answer cache in entries (LRU; default 4096, 0 disables it).
	// Answers of a frozen model at temperature 0 are reused across steps.
	CacheSize int `yaml:"cache_size"`
	// CacheDir optionally persists the answer cache on disk (one file per entry),
	// so answers survive restarts and resumed runs. Empty: memory only.
	CacheDir string `yaml:"cache_dir"`
	// MaxFailedFraction stops the run when more than this fraction of one
	// step's rollouts (or of one evaluation's turns) fail (default 0.5; 1
	// never stops). A failed step is not checkpointed: --resume redoes it.
	MaxFailedFraction float64 `yaml:"max_failed_fraction"`
}

// OllamaConfig configures the frozen response model served by Ollama.
type OllamaConfig struct {
	// Model is the frozen response model (`ollama pull` it first / the served model name).
	Model string   `yaml:"model"`
	Hosts []string `yaml:"hosts"` // empty: OLLAMA_HOST or http://127.0.0.1:11434
	// MaxPerHost bounds in-flight requests per host (default 4; match OLLAMA_NUM_PARALLEL).
	MaxPerHost int `yaml:"max_per_host"`
	// HostLimits optionally overrides MaxPerHost per host, aligned with Hosts.
	HostLimits []int `yaml:"host_limits"`
	// Temperature of the frozen model (default 0: answers are deterministic and cacheable).
	Temperature float64 `yaml:"temperature"`
	// Seed sent with every request (default 42).
	Seed int `yaml:"seed"`
	// NumPredict caps the answer length in tokens (default 128).
	NumPredict int `yaml:"num_predict"`
	// NumCtx is fixed for the run: changing runner options between requests
	// makes Ollama reload the model (default 4096).
	NumCtx int `yaml:"num_ctx"`
	// NumThread is passed through when > 0 (tests use 1).
	NumThread int `yaml:"num_thread"`
	// KeepAlive keeps the model loaded between steps (default "30m").
	KeepAlive string     `yaml:"keep_alive"`
	Call      CallConfig `yaml:",inline"`
}

// OpenAIConfig configures an OpenAI-compatible /v1/chat/completions endpoint.
type OpenAIConfig struct {
	// Model is the frozen response model (`ollama pull` it first / the served model name).
	Model string `yaml:"model"`
	// BaseURLs are the endpoints up to and including /v1, e.g. http://127.0.0.1:8000/v1.
	BaseURLs []string `yaml:"base_urls"`
	// APIKeyEnv names the environment variable holding the bearer token (optional).
	APIKeyEnv string `yaml:"api_key_env"`
	// MaxPerHost bounds in-flight requests per endpoint.
	MaxPerHost int `yaml:"max_per_host"`
	// Temperature of the frozen model (0: deterministic answers, cacheable).
	Temperature float64 `yaml:"temperature"`
	// Seed sent with every request.
	Seed int `yaml:"seed"`
	// MaxTokens caps the answer length in tokens.
	MaxTokens int        `yaml:"max_tokens"`
	Call      CallConfig `yaml:",inline"`
}

// CallConfig is the per-call timeout and retry policy of a network responder.
type CallConfig struct {
	// Timeout of one HTTP call, including queueing on the server (default 60s).
	Timeout time.Duration `yaml:"timeout"`
	// Retries after the first attempt on connection errors, timeouts, 429, 503
	// and other 5xx (default 6). 4xx such as 404 are never retried.
	Retries int `yaml:"retries"`
	// BackoffBase and BackoffMax bound the exponential backoff with full jitter
	// (defaults 200ms and 5s).
	BackoffBase time.Duration `yaml:"backoff_base"`
	BackoffMax  time.Duration `yaml:"backoff_max"`
}

// Policy is the HTTP layer's view of these settings.
func (c CallConfig) Policy() httpcall.Policy {
	return httpcall.Policy{Timeout: c.Timeout, Retries: c.Retries, BackoffBase: c.BackoffBase, BackoffMax: c.BackoffMax}
}

// PromptConfig holds the chat templates (Go text/template). The user template
// sees .Question (string) and .Chunks ([]retrieval.Ranked, best first) and
// .Context (the chunks rendered as numbered passages).
type PromptConfig struct {
	// System is the system message of the responder's chat prompt.
	System string `yaml:"system"`
	// User is the user message template (Go text/template over .Question, .Chunks, .Context).
	User string `yaml:"user"`
	// MaxChunks limits how many retrieved chunks enter the prompt (default 3).
	MaxChunks int `yaml:"max_chunks"`
}

// ExtractiveConfig configures the embedded extractive baseline reader.
type ExtractiveConfig struct {
	// MaxChunks is how many top chunks the span is searched in (default 3).
	MaxChunks int `yaml:"max_chunks"`
	// MaxWords is the longest answer span in words (default 40).
	MaxWords int `yaml:"max_words"`
}

// Default prompt templates: answer from the passages only, briefly.
const (
	DefaultSystemPrompt = "You answer questions using only the provided passages. Answer briefly, in one or two sentences. If the passages do not contain the answer, say you don't know."
	DefaultUserPrompt   = "Passages:\n{{.Context}}\nQuestion: {{.Question}}\nAnswer:"
)

// Upper bounds on sizes, far above real use: a typo must fail validation,
// not exhaust memory or a server.
const (
	maxConcurrency   = 4096
	maxCacheSize     = 1 << 20
	maxChunks        = 1000
	maxAnswerTokens  = 1 << 17
	maxContextTokens = 1 << 21
)

// DefaultCallConfig returns the default timeout and retry policy.
func DefaultCallConfig() CallConfig {
	return CallConfig{Timeout: 60 * time.Second, Retries: 6, BackoffBase: 200 * time.Millisecond, BackoffMax: 5 * time.Second}
}

// DefaultConfig returns the embedded defaults.
func DefaultConfig() Config {
	return Config{
		Responder:   "extractive",
		Concurrency: 16,
		Ollama: OllamaConfig{MaxPerHost: 4, Temperature: 0, Seed: 42, NumPredict: 128, NumCtx: 4096,
			KeepAlive: "30m", Call: DefaultCallConfig()},
		OpenAI:            OpenAIConfig{MaxPerHost: 8, Temperature: 0, Seed: 42, MaxTokens: 128, Call: DefaultCallConfig()},
		Extractive:        DefaultExtractiveConfig(),
		Prompt:            PromptConfig{System: DefaultSystemPrompt, User: DefaultUserPrompt, MaxChunks: 3},
		Dedup:             true,
		CacheSize:         4096,
		MaxFailedFraction: 0.5,
	}
}

// DefaultExtractiveConfig returns the extractive reader's defaults.
func DefaultExtractiveConfig() ExtractiveConfig {
	return ExtractiveConfig{MaxChunks: 3, MaxWords: 40}
}

// Validate checks modes and ranges.
func (c Config) Validate() error {
	switch c.Responder {
	case "extractive", "ollama", "openai":
	default:
		return fielderr.New("responder", "must be extractive, ollama or openai, got %q", c.Responder)
	}
	if c.Concurrency < 1 || c.Concurrency > maxConcurrency {
		return fielderr.New("concurrency", "must be in [1, %d], got %d", maxConcurrency, c.Concurrency)
	}
	if c.CacheSize < 0 || c.CacheSize > maxCacheSize {
		return fielderr.New("cache_size", "must be in [0, %d], got %d", maxCacheSize, c.CacheSize)
	}
	if f := c.MaxFailedFraction; !(f >= 0 && f <= 1) {
		return fielderr.New("max_failed_fraction", "must be in [0, 1], got %v", f)
	}
	if err := c.Extractive.Validate(); err != nil {
		return fielderr.Prefix("extractive", err)
	}
	if c.Prompt.MaxChunks < 1 || c.Prompt.MaxChunks > maxChunks {
		return fielderr.New("prompt.max_chunks", "must be in [1, %d], got %d", maxChunks, c.Prompt.MaxChunks)
	}
	if strings.TrimSpace(c.Prompt.User) == "" {
		return fielderr.New("prompt.user", "must not be empty")
	}
	if _, err := newPromptTemplate(c.Prompt); err != nil {
		return fielderr.New("prompt", "%v", err)
	}
	switch c.Responder {
	case "ollama":
		if err := c.Ollama.validate(); err != nil {
			return fielderr.Prefix("ollama", err)
		}
	case "openai":
		if err := c.OpenAI.validate(); err != nil {
			return fielderr.Prefix("openai", err)
		}
	}
	return nil
}

// Validate checks the extractive reader's ranges.
func (c ExtractiveConfig) Validate() error {
	if c.MaxChunks < 1 || c.MaxChunks > maxChunks {
		return fielderr.New("max_chunks", "must be in [1, %d], got %d", maxChunks, c.MaxChunks)
	}
	if c.MaxWords < 1 || c.MaxWords > maxAnswerTokens {
		return fielderr.New("max_words", "must be in [1, %d], got %d", maxAnswerTokens, c.MaxWords)
	}
	return nil
}

func (c OllamaConfig) validate() error {
	if c.Model == "" {
		return fielderr.New("model", "is required when responder is ollama")
	}
	if c.MaxPerHost < 1 || c.MaxPerHost > maxConcurrency {
		return fielderr.New("max_per_host", "must be in [1, %d], got %d", maxConcurrency, c.MaxPerHost)
	}
	if len(c.HostLimits) > 0 && len(c.HostLimits) != len(c.Hosts) {
		return fielderr.New("host_limits", "has %d entries but hosts has %d", len(c.HostLimits), len(c.Hosts))
	}
	for i, l := range c.HostLimits {
		if l < 1 || l > maxConcurrency {
			return fielderr.New("host_limits", "entry %d must be in [1, %d], got %d", i, maxConcurrency, l)
		}
	}
	for i, h := range c.Hosts {
		if _, err := httpcall.ParseHost(h); err != nil {
			return fielderr.New("hosts", "entry %d: %v", i, err)
		}
	}
	if c.Temperature < 0 {
		return fielderr.New("temperature", "must be ≥ 0, got %v", c.Temperature)
	}
	if c.NumPredict == 0 || c.NumPredict < -2 || c.NumPredict > maxAnswerTokens {
		return fielderr.New("num_predict", "must be in [1, %d] (or -1 for unlimited), got %d", maxAnswerTokens, c.NumPredict)
	}
	if c.NumCtx < 1 || c.NumCtx > maxContextTokens {
		return fielderr.New("num_ctx", "must be in [1, %d], got %d", maxContextTokens, c.NumCtx)
	}
	if c.NumThread < 0 {
		return fielderr.New("num_thread", "must be ≥ 0, got %d", c.NumThread)
	}
	if c.KeepAlive != "" {
		if _, err := parseKeepAlive(c.KeepAlive); err != nil {
			return fielderr.New("keep_alive", "%v", err)
		}
	}
	return c.Call.validate()
}

func (c OpenAIConfig) validate() error {
	if c.Model == "" {
		return fielderr.New("model", "is required when responder is openai")
	}
	if len(c.BaseURLs) == 0 {
		return fielderr.New("base_urls", "needs at least one endpoint, e.g. http://127.0.0.1:8000/v1")
	}
	for i, h := range c.BaseURLs {
		if _, err := httpcall.ParseHost(h); err != nil {
			return fielderr.New("base_urls", "entry %d: %v", i, err)
		}
	}
	if c.MaxPerHost < 1 || c.MaxPerHost > maxConcurrency {
		return fielderr.New("max_per_host", "must be in [1, %d], got %d", maxConcurrency, c.MaxPerHost)
	}
	if c.Temperature < 0 {
		return fielderr.New("temperature", "must be ≥ 0, got %v", c.Temperature)
	}
	if c.MaxTokens < 1 || c.MaxTokens > maxAnswerTokens {
		return fielderr.New("max_tokens", "must be in [1, %d], got %d", maxAnswerTokens, c.MaxTokens)
	}
	return c.Call.validate()
}

func (c CallConfig) validate() error {
	if c.Timeout <= 0 {
		return fielderr.New("timeout", "must be > 0, got %v", c.Timeout)
	}
	if c.Retries < 0 || c.Retries > 100 {
		return fielderr.New("retries", "must be in [0, 100], got %d", c.Retries)
	}
	if c.BackoffBase <= 0 {
		return fielderr.New("backoff_base", "must be > 0, got %v", c.BackoffBase)
	}
	if c.BackoffMax < c.BackoffBase {
		return fielderr.New("backoff_max", "must be ≥ backoff_base (%v), got %v", c.BackoffBase, c.BackoffMax)
	}
	return nil
}
