package trainer

import (
	"math"
	"strconv"
	"strings"

	"github.com/himes-rl/himes/internal/fielderr"
)

// Config is the "trainer" section: where the policy lives.
type Config struct {
	// Endpoint is "embedded" (in-process pure-Go policy), the URL of a
	// running trainer server, or "launch": himes train and eval start the
	// reference trainer that Launch describes and use its URL.
	Endpoint string `yaml:"endpoint"`
	// Token is an optional bearer token; "$ENV" reads it from an environment variable.
	Token string `yaml:"token"`
	// TimeoutSeconds bounds one HTTP attempt (default 600: a grpo_step on a
	// large batch can take minutes).
	TimeoutSeconds float64 `yaml:"timeout_seconds"`
	// Retries is how many times a failed call is retried (connection errors,
	// timeouts, retryable errors); default 4.
	Retries int `yaml:"retries"`
	// ReconnectSeconds is how long a call waits for an endpoint that refuses
	// connections (a restarting `himes trainer serve`) before failing,
	// whatever retries says; default 120, 0 = only the retries.
	ReconnectSeconds float64 `yaml:"reconnect_s"`
	// Embedded configures the embedded policy (Endpoint "embedded", and
	// `himes trainer serve`).
	Embedded EmbeddedConfig `yaml:"embedded"`
	// Launch is the reference trainer himes starts itself (Endpoint
	// "launch"); ignored for any other endpoint, so that
	// --set trainer.endpoint=URL uses a server started by hand instead.
	Launch LaunchConfig `yaml:"launch"`
}

// LaunchEndpoint is the Endpoint value that starts Launch's trainer.
const LaunchEndpoint = "launch"

// LaunchConfig describes the reference trainer (scripts/lora_trainer) that
// himes starts as `PYTHON -m lora_trainer ARGS --host 127.0.0.1 --port 0
// --port-file F --checkpoint-dir <run>/trainer` (under torchrun when
// NProc > 1, see Argv) for one command and stops at its end.
type LaunchConfig struct {
	// Python is the interpreter; default: the one scripts/ci/python-env.sh
	// prints (the clone's .venv), found from the working directory up.
	Python string `yaml:"python"`
	// Args are lora_trainer's arguments (--backend tagger ...); himes sets
	// the host, port, port file and checkpoint directory itself.
	Args []string `yaml:"args"`
	// Env holds extra KEY=VALUE environment variables for the trainer.
	Env []string `yaml:"env"`
	// ReadyTimeoutSeconds bounds the wait until the trainer listens (it
	// loads its model first); default 600.
	ReadyTimeoutSeconds float64 `yaml:"ready_timeout_seconds"`
	// StopTimeoutSeconds is how long the trainer may take to exit after
	// SIGTERM before it is killed; default 30.
	StopTimeoutSeconds float64 `yaml:"stop_timeout_seconds"`
	// NProc is the number of data-parallel trainer processes; default 1.
	// Above 1 himes starts `PYTHON -m torch.distributed.run --standalone
	// --nproc_per_node NPROC -m lora_trainer ...`: rank 0 serves the
	// protocol, every rank takes a shard of each sft_step and grpo_step
	// (gloo on CPU, NCCL on GPU; scripts/lora_trainer/README.md).
	NProc int `yaml:"nproc"`
}

// Argv is the command line of the launched trainer: python's module
// lora_trainer with Args and then extra (the flags himes owns), run through
// torch.distributed.run (torchrun) when NProc > 1. --standalone makes
// torchrun pick a free rendezvous port on loopback, so runs never collide.
func (c LaunchConfig) Argv(python string, extra ...string) []string {
	argv := []string{python}
	if c.NProc > 1 {
		argv = append(argv, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", strconv.Itoa(c.NProc))
	}
	argv = append(argv, "-m", "lora_trainer")
	argv = append(argv, c.Args...)
	return append(argv, extra...)
}

// LaunchOwnedFlags are the lora_trainer flags himes sets for a launched
// trainer: a free port reported through a port file, on loopback, and the
// run's checkpoint directory (so a resumed run's new trainer finds them).
var LaunchOwnedFlags = []string{"--host", "--port", "--port-file", "--checkpoint-dir"}

// EmbeddedConfig holds the embedded term-selection policy's knobs. Learning
// rates and loss settings arrive per request.
type EmbeddedConfig struct {
	// MaxCandidates caps the candidate terms (= tokens) per prompt; default 64.
	MaxCandidates int `yaml:"max_candidates"`
	// InitBias is the initial weight of the bias feature (default 0: every
	// term kept with probability ½ at T = 1; negative keeps fewer).
	InitBias float64 `yaml:"init_bias"`
	// InitStd is the standard deviation of the Gaussian initial weights of the
	// other features (default 0: all zero).
	InitStd float64 `yaml:"init_std"`
	// InitSeed seeds the initial weights.
	InitSeed int64 `yaml:"init_seed"`
	// AdamBeta1, AdamBeta2, AdamEps are Adam's constants (0.9, 0.999, 1e-8).
	AdamBeta1 float64 `yaml:"adam_beta1"`
	AdamBeta2 float64 `yaml:"adam_beta2"`
	AdamEps   float64 `yaml:"adam_eps"`
	// CheckpointDir is where save writes and load reads (default
	// "checkpoints/trainer", relative to the working directory).
	CheckpointDir string `yaml:"checkpoint_dir"`
	// StepCache is how many step_id results are remembered for replay (default 1024).
	StepCache int `yaml:"step_cache"`
	// MaxPrompts is the most prompts one sample call may carry (default
	// 1024); larger requests are refused, so that one request cannot exhaust
	// the server's memory. Reported as info.limits.max_prompts.
	MaxPrompts int `yaml:"max_prompts"`
	// MaxN is the most samples per prompt of one sample call (default 128;
	// info.limits.max_n).
	MaxN int `yaml:"max_n"`
	// MaxBatch is the most samples of one grpo_step, examples of one
	// sft_step and items of one logprobs call (default 8192;
	// info.limits.max_batch). info.limits.max_tokens is MaxCandidates.
	MaxBatch int `yaml:"max_batch"`
	// SFTPosWeight weighs the "keep" terms in sft_step's cross-entropy
	// (default 1: plain logistic regression). Few history terms are in a
	// human rewrite (about 1 in 10 user-turn terms), so the calibrated
	// p(keep) of a right term is often below ½ and greedy decoding drops it;
	// a weight w moves the decision to p > 1/(1+w).
	SFTPosWeight float64 `yaml:"sft_pos_weight"`
	// SampleCalibration says what GRPO samples after an SFT with
	// sft_pos_weight w ≠ 1. "prior" (default): the calibrated keep
	// probability σ(z − ln w) (the prior correction of a class-weighted
	// logistic regression), so the weight moves only the greedy decision
	// (keep iff z > 0, i.e. calibrated p > 1/(1+w)) and not the samples: at
	// w = 5 uncorrected T = 1 samples kept about 2.5 times the greedy
	// rewrite's terms. "none": σ(z), the weighted logits as they are. Without
	// SFT, or with w = 1, the two are the same policy.
	SampleCalibration string `yaml:"sample_calibration"`
}

// The values of EmbeddedConfig.SampleCalibration.
const (
	SampleCalibrationPrior = "prior"
	SampleCalibrationNone  = "none"
)

// DefaultConfig uses the embedded policy.
func DefaultConfig() Config {
	return Config{Endpoint: "embedded", TimeoutSeconds: 600, Retries: 4, ReconnectSeconds: 120, Embedded: DefaultEmbeddedConfig(),
		Launch: LaunchConfig{ReadyTimeoutSeconds: 600, StopTimeoutSeconds: 30, NProc: 1}}
}

// DefaultEmbeddedConfig returns the documented defaults.
func DefaultEmbeddedConfig() EmbeddedConfig {
	return EmbeddedConfig{
		MaxCandidates: 64, InitSeed: 1,
		AdamBeta1: 0.9, AdamBeta2: 0.999, AdamEps: 1e-8,
		CheckpointDir: "checkpoints/trainer", StepCache: 1024, SFTPosWeight: 1, SampleCalibration: SampleCalibrationPrior,
		MaxPrompts: 1024, MaxN: 128, MaxBatch: 8192,
	}
}

// RedactedToken stands for a literal token in a written config (config.yaml
// of a run, `himes config show`): a secret must not land in a 0644 file or a
// report. "$ENV" references are written as they are.
const RedactedToken = "<redacted>"

// Redacted returns c with a literal Token replaced by RedactedToken.
func (c Config) Redacted() Config {
	if c.Token != "" && !strings.HasPrefix(c.Token, "$") {
		c.Token = RedactedToken
	}
	return c
}

// Validate checks the endpoint and the knobs.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return fielderr.New("endpoint", "is required (\"embedded\", \"launch\" or a URL)")
	}
	if c.Endpoint == LaunchEndpoint {
		if err := c.Launch.Validate(); err != nil {
			return fielderr.Prefix("launch", err)
		}
	}
	if c.Token == RedactedToken {
		return fielderr.New("token", "was redacted when the config was saved; pass it as --set trainer.token='$VAR' (an environment variable)")
	}
	if c.Endpoint != "embedded" && c.Endpoint != LaunchEndpoint {
		if _, err := parseBaseURL(c.Endpoint); err != nil {
			return fielderr.New("endpoint", "want \"embedded\", \"launch\" or an http(s) URL: %v", err)
		}
	}
	if !(c.TimeoutSeconds > 0) || math.IsInf(c.TimeoutSeconds, 0) {
		return fielderr.New("timeout_seconds", "must be > 0, got %v", c.TimeoutSeconds)
	}
	if c.Retries < 0 || c.Retries > 100 {
		return fielderr.New("retries", "must be in [0, 100], got %d", c.Retries)
	}
	if !(c.ReconnectSeconds >= 0 && c.ReconnectSeconds <= 86400) {
		return fielderr.New("reconnect_s", "must be in [0, 86400], got %v", c.ReconnectSeconds)
	}
	if err := c.Embedded.Validate(); err != nil {
		return fielderr.Prefix("embedded", err)
	}
	return nil
}

// Validate checks the launch section (trainer.endpoint "launch").
func (c LaunchConfig) Validate() error {
	if len(c.Args) == 0 {
		return fielderr.New("args", "is required with trainer.endpoint \"launch\": lora_trainer's arguments, e.g. [--backend, tagger]")
	}
	for i, a := range c.Args {
		for _, f := range LaunchOwnedFlags {
			if a == f || strings.HasPrefix(a, f+"=") {
				return fielderr.New("args", "item %d: %s is set by himes for a launched trainer (a free port, loopback, the run's trainer/ directory); remove it", i, f)
			}
		}
	}
	for i, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fielderr.New("env", "item %d: %q is not KEY=VALUE", i, e)
		}
	}
	if c.NProc < 1 {
		return fielderr.New("nproc", "must be >= 1 (the number of data-parallel trainer processes), got %d", c.NProc)
	}
	if err := fielderr.Seconds("ready_timeout_seconds", c.ReadyTimeoutSeconds); err != nil {
		return err
	}
	return fielderr.Seconds("stop_timeout_seconds", c.StopTimeoutSeconds)
}

// Validate checks the embedded policy's knobs.
func (c EmbeddedConfig) Validate() error {
	if c.MaxCandidates < 1 || c.MaxCandidates > 1<<15 {
		return fielderr.New("max_candidates", "must be in [1, %d], got %d", 1<<15, c.MaxCandidates)
	}
	if !finite(c.InitBias) {
		return fielderr.New("init_bias", "must be finite, got %v", c.InitBias)
	}
	if !finite(c.InitStd) || c.InitStd < 0 {
		return fielderr.New("init_std", "must be ≥ 0, got %v", c.InitStd)
	}
	if !(c.AdamBeta1 >= 0 && c.AdamBeta1 < 1) {
		return fielderr.New("adam_beta1", "must be in [0, 1), got %v", c.AdamBeta1)
	}
	if !(c.AdamBeta2 >= 0 && c.AdamBeta2 < 1) {
		return fielderr.New("adam_beta2", "must be in [0, 1), got %v", c.AdamBeta2)
	}
	if !(c.AdamEps > 0) || !finite(c.AdamEps) {
		return fielderr.New("adam_eps", "must be > 0, got %v", c.AdamEps)
	}
	if c.CheckpointDir == "" {
		return fielderr.New("checkpoint_dir", "is required")
	}
	if c.StepCache < 1 || c.StepCache > 1<<20 {
		return fielderr.New("step_cache", "must be in [1, %d], got %d", 1<<20, c.StepCache)
	}
	for _, l := range []struct {
		key string
		v   int
	}{{"max_prompts", c.MaxPrompts}, {"max_n", c.MaxN}, {"max_batch", c.MaxBatch}} {
		if l.v < 1 || l.v > maxLimit {
			return fielderr.New(l.key, "must be in [1, %d], got %d", maxLimit, l.v)
		}
	}
	if !(c.SFTPosWeight > 0) || !finite(c.SFTPosWeight) {
		return fielderr.New("sft_pos_weight", "must be > 0, got %v", c.SFTPosWeight)
	}
	if c.SampleCalibration != SampleCalibrationPrior && c.SampleCalibration != SampleCalibrationNone {
		return fielderr.New("sample_calibration", "must be %q or %q, got %q", SampleCalibrationPrior, SampleCalibrationNone, c.SampleCalibration)
	}
	return nil
}

// maxLimit bounds the request limits: the embedded policy has no "no limit".
const maxLimit = 1 << 20

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
