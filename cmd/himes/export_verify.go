package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/internal/httpcall"
	"github.com/himes-rl/himes/internal/ollama"
	"github.com/himes-rl/himes/internal/ollamaserve"
)

// DefaultMinAgreement is --verify-data's threshold: the share of turns whose
// greedy rewrites must be identical (trainer and Ollama) for the command to
// succeed. 0.9: 11 of 12 turns pass, 10 of 12 fail.
const DefaultMinAgreement = 0.9

// verifyExport is `himes export ollama --verify-data`: it creates the
// exported model on an Ollama server, rewrites the file's turns greedily with
// the trainer (python -m lora_trainer.export_gguf greedy: the base and adapter
// in transformers + PEFT, float32) and with Ollama, and compares them.
type verifyExport struct {
	data, host, name, modelfile, python, llamaLogits string
	base, adapter, gguf                              string
	cfg                                              configs.Config
	minAgreement                                     float64
	maxTokens                                        int    // 0: the config's grpo.max_tokens
	work                                             string // a directory for the prompts and the trainer's output
}

// trainerGreedy is one line of export_gguf greedy's output.
type trainerGreedy struct {
	Text        string    `json:"text"`
	Tokens      []int     `json:"tokens"`
	PromptIDs   []int     `json:"prompt_ids"`
	MaxTokens   int       `json:"max_tokens"`
	FirstLogits []float32 `json:"first_logits"`
}

// verifyResult is what --verify-data measured.
type verifyResult struct {
	Agree, N     int
	MaxLogitDiff float64 // NaN when not measured
	LogitsHow    string
	Differ       []string // "TURN: trainer %q, ollama %q"
}

func (v *verifyExport) run(ctx context.Context) (verifyResult, error) {
	res := verifyResult{MaxLogitDiff: math.NaN()}
	load := v.cfg.Data.LoadOptions()
	load.RequireQuestion = true
	turns, _, err := datasets.LoadContext(ctx, v.data, load)
	if err != nil {
		return res, fmt.Errorf("--verify-data: %w", err)
	}
	turns = datasets.PromptTurns(turns, false)
	if len(turns) == 0 {
		return res, fmt.Errorf("--verify-data %s: no turns with a question", v.data)
	}
	render, err := datasets.NewRenderer(v.cfg.Data.Prompt)
	if err != nil {
		return res, fmt.Errorf("data.prompt: %w", err)
	}
	if err := os.MkdirAll(v.work, 0o755); err != nil {
		return res, fmt.Errorf("verify directory: %w", err)
	}
	var prompts bytes.Buffer
	msgs := make([][]api.Message, len(turns))
	for i, t := range turns {
		p, err := render.RenderContext(ctx, t)
		if err != nil {
			return res, fmt.Errorf("--verify-data %s: turn %s: %w", v.data, t.ID(), err)
		}
		for _, m := range p.Messages {
			msgs[i] = append(msgs[i], api.Message{Role: m.Role, Content: m.Text})
		}
		line, err := json.Marshal(map[string]any{"messages": msgs[i]})
		if err != nil {
			return res, err
		}
		prompts.Write(append(line, '\n'))
	}
	promptsPath := filepath.Join(v.work, "prompts.jsonl")
	if err := os.WriteFile(promptsPath, prompts.Bytes(), 0o644); err != nil {
		return res, fmt.Errorf("write %s: %w", promptsPath, err)
	}
	maxTokens := v.cfg.GRPO.MaxTokens
	if v.maxTokens > 0 {
		maxTokens = v.maxTokens
	}

	// The trainer's greedy rewrites and first-token logits.
	slog.Info("trainer greedy rewrites", "turns", len(turns), "max_tokens", maxTokens)
	trainerOut := filepath.Join(v.work, "trainer.jsonl")
	args := []string{"-m", "lora_trainer.export_gguf", "greedy", "--base", v.base, "--adapter", v.adapter,
		"--prompts", promptsPath, "--max-tokens", fmt.Sprint(maxTokens), "--full-logits"}
	if err := runTo(ctx, trainerOut, v.python, args...); err != nil {
		return res, err
	}
	trainer, err := readGreedy(trainerOut, len(turns))
	if err != nil {
		return res, err
	}

	// Ollama: create the model, then its greedy rewrites.
	bin, err := ollamaserve.FindBinary()
	if err != nil {
		return res, fmt.Errorf("ollama create: %w", err)
	}
	c := exec.CommandContext(ctx, bin, "create", v.name, "-f", v.modelfile)
	c.Env = append(os.Environ(), "OLLAMA_HOST="+strings.TrimPrefix(strings.TrimPrefix(v.host, "http://"), "https://"))
	if out, err := c.CombinedOutput(); err != nil {
		return res, fmt.Errorf("ollama create %s -f %s: %w: %s", v.name, v.modelfile, err, lastOutput(out))
	}
	client, err := ollama.New([]string{v.host}, 1, nil, httpcall.Policy{Timeout: 10 * time.Minute, Retries: 2,
		BackoffBase: time.Second, BackoffMax: 10 * time.Second}, 1)
	if err != nil {
		return res, fmt.Errorf("--ollama-host: %w", err)
	}
	defer client.Close()
	res.N = len(turns)
	var servedText bytes.Buffer
	defer func() {
		path := filepath.Join(v.work, "ollama.jsonl")
		if err := os.WriteFile(path, servedText.Bytes(), 0o644); err != nil {
			slog.Warn("could not write Ollama's rewrites", "path", path, "err", err)
		}
	}()
	for i, t := range turns {
		opts := map[string]any{"temperature": 0, "top_k": 1, "repeat_penalty": 1, "seed": 1, "num_predict": maxTokens}
		got, err := client.Chat(ctx, ollama.ChatRequest{ChatRequest: api.ChatRequest{Model: v.name, Messages: msgs[i], Options: opts}})
		if err != nil {
			return res, fmt.Errorf("ollama %s, turn %s: %w", v.name, t.ID(), err)
		}
		line, _ := json.Marshal(map[string]string{"turn": t.ID(), "text": got})
		servedText.Write(append(line, '\n'))
		if strings.TrimSpace(got) == strings.TrimSpace(trainer[i].Text) {
			res.Agree++
		} else {
			res.Differ = append(res.Differ, fmt.Sprintf("%s: trainer %q, ollama %q", t.ID(), trainer[i].Text, got))
		}
	}

	// The served model's first-token logits: Ollama's API has none, so
	// they come from the same GGUF in Ollama's llama.cpp (scripts/llamalogits).
	if v.llamaLogits == "" {
		res.LogitsHow = "not measured: Ollama v0.6.5's API returns no logits; pass --llamalogits BIN (go build -tags llamalogits ./scripts/llamalogits) to compute them from the GGUF in Ollama's llama.cpp"
		return res, nil
	}
	if v.gguf == "" {
		res.LogitsHow = "not measured: --format adapter has no single GGUF to load"
		return res, nil
	}
	servedOut := filepath.Join(v.work, "llamalogits.jsonl")
	in, err := os.Open(trainerOut)
	if err != nil {
		return res, err
	}
	defer in.Close()
	lc := exec.CommandContext(ctx, v.llamaLogits, "-model", v.gguf)
	lc.Stdin = in
	if err := runCmdTo(lc, servedOut); err != nil {
		return res, err
	}
	served, err := readGreedy(servedOut, len(turns))
	if err != nil {
		return res, err
	}
	res.MaxLogitDiff = 0
	for i := range trainer {
		a, b := trainer[i].FirstLogits, served[i].FirstLogits
		if len(a) != len(b) {
			return res, fmt.Errorf("turn %s: %d trainer logits against %d served", turns[i].ID(), len(a), len(b))
		}
		for j := range a {
			res.MaxLogitDiff = math.Max(res.MaxLogitDiff, math.Abs(float64(a[j])-float64(b[j])))
		}
	}
	res.LogitsHow = "the GGUF in Ollama's llama.cpp (scripts/llamalogits: F16 KV cache as Ollama) against the trainer (float32), the same prompt token ids"
	return res, nil
}

func runTo(ctx context.Context, out, bin string, args ...string) error {
	return runCmdTo(exec.CommandContext(ctx, bin, args...), out)
}

func runCmdTo(c *exec.Cmd, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	var stderr bytes.Buffer
	c.Stdout, c.Stderr = f, &stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(c.Args, " "), err, lastOutput(stderr.Bytes()))
	}
	return f.Close()
}

func readGreedy(path string, n int) ([]trainerGreedy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []trainerGreedy
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for line := 1; sc.Scan(); line++ {
		var g trainerGreedy
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, g)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) != n {
		return nil, fmt.Errorf("%s: %d results for %d turns", path, len(out), n)
	}
	return out, nil
}

func lastOutput(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return strings.Join(lines, "\n")
}
