package export

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ollama/ollama/parser"
)

// Export formats of `himes export ollama --format`.
const (
	// FormatMerged: the adapter merged into the base in float32 and the
	// model written as one GGUF (F32 or F16) by lora_trainer.export_gguf;
	// Ollama serves the file as written. The default: measured faithful
	// (docs/LLM_ON_CPU.md, "Served = trained").
	FormatMerged = "merged"
	// FormatAdapter: FROM the base, ADAPTER the PEFT adapter, converted by
	// Ollama itself (F16 weights; q_proj/k_proj misconverted on llama).
	FormatAdapter = "adapter"
)

// GreedyParams are the Modelfile parameters of a merged export: Ollama's
// defaults sample (temperature 0.8) and penalize repeats (repeat_penalty 1.1
// over the last 64 tokens, prompt included), while the trainer's greedy
// rewrite is the plain argmax; a rewrite copies words of the question, so
// the penalty alone changes it. --param overrides them.
var GreedyParams = []string{"temperature=0", "top_k=1", "repeat_penalty=1"}

// MergedNote is what a merged export's Modelfile says.
const MergedNote = `The rewriter as one GGUF: the LoRA adapter merged into the base weights in
float32 and written with llama.cpp's gguf writer (tokenizer and chat template
included) by python -m lora_trainer.export_gguf; Ollama copies the file and
converts nothing. Greedy decoding as the trainer's: temperature 0, top_k 1,
repeat_penalty 1.`

// MergedResult says what a merged export wrote.
type MergedResult struct {
	Modelfile string         // OUT/Modelfile
	GGUF      string         // OUT/model.gguf (absolute)
	Summary   map[string]any // export_gguf's JSON line: architecture, dtype, tensors, vocab, pre_tokenizer, bytes
}

// WriteOllamaMerged merges o.Adapter into o.Base (the trainer's model
// directory) with python (the trainer environment's interpreter), writes
// OUT/model.gguf at dtype ("f32" or "f16") and a Modelfile FROM it.
func WriteOllamaMerged(ctx context.Context, o Ollama, python, dtype string) (MergedResult, error) {
	var res MergedResult
	if dtype != "f32" && dtype != "f16" {
		return res, fmt.Errorf("--dtype %q: want f32 or f16", dtype)
	}
	if o.Out == "" {
		return res, errors.New("--out: is required")
	}
	st, err := os.Stat(o.Base)
	if err != nil || !st.IsDir() {
		return res, fmt.Errorf("--base %q: --format merged needs the trainer's model directory (config.json, safetensors, tokenizer.json); for an Ollama model name or a GGUF use --format adapter", o.Base)
	}
	params, err := parseModelfileParams(append(append([]string{}, GreedyParams...), o.Params...))
	if err != nil {
		return res, err
	}
	base, err := filepath.Abs(o.Base)
	if err != nil {
		return res, fmt.Errorf("--base %q: %w", o.Base, err)
	}
	adapter, err := filepath.Abs(o.Adapter)
	if err != nil {
		return res, fmt.Errorf("--adapter %q: %w", o.Adapter, err)
	}
	if _, err := os.Stat(filepath.Join(adapter, "adapter", "adapter_config.json")); err == nil {
		adapter = filepath.Join(adapter, "adapter")
	}
	if _, err := readPEFTConfig(adapter); err != nil {
		return res, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return res, fmt.Errorf("--out: %w", err)
	}
	out, err := filepath.Abs(filepath.Join(o.Out, "model.gguf"))
	if err != nil {
		return res, fmt.Errorf("--out: %w", err)
	}
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, python, "-m", "lora_trainer.export_gguf", "write",
		"--base", base, "--adapter", adapter, "--out", out, "--dtype", dtype)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return res, fmt.Errorf("%s -m lora_trainer.export_gguf write: %w: %s", python, err, lastLines(stderr.String(), 5))
	}
	if err := json.Unmarshal(lastLine(stdout.Bytes()), &res.Summary); err != nil {
		return res, fmt.Errorf("lora_trainer.export_gguf write: its summary line: %w (stdout %q)", err, stdout.String())
	}
	res.GGUF = out

	mf := parser.Modelfile{Commands: append([]parser.Command{{Name: "model", Args: out}}, params...)}
	res.Modelfile = filepath.Join(o.Out, "Modelfile")
	header := []string{fmt.Sprintf("Written by `himes export ollama --format merged`: adapter %s merged into %s, %s.", adapter, base, strings.ToUpper(dtype))}
	return res, writeModelfile(res.Modelfile, append(header, strings.Split(MergedNote, "\n")...), mf)
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
