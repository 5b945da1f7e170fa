package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/ollama/ollama/parser"
	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/internal/atomicfile"
)

func newExportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export a trained rewriter (e.g. an Ollama Modelfile)",
	}
	cmd.AddCommand(newExportOllamaCmd())
	return cmd
}

// ollamaNote is what every Modelfile and the command's help say about which
// adapters Ollama can serve.
const ollamaNote = `Ollama applies LoRA adapters only in its llama.cpp runner, and converts
PEFT (safetensors) adapters itself only for the llama (incl. Mistral) and
gemma2 architectures (Ollama 0.6). For qwen2 / qwen2.5 and other
architectures the llama.cpp runner serves, convert the adapter to a GGUF
LoRA first with llama.cpp's convert_lora_to_gguf.py and pass the .gguf file
as --adapter. FROM must be the base model the adapter was trained on
(preferably an unquantized tag, e.g. qwen2.5:1.5b-instruct-fp16).`

// ollamaExport is one `himes export ollama` request.
type ollamaExport struct {
	Base    string   // FROM: an Ollama model name or a path
	Adapter string   // a PEFT adapter dir, a lora_trainer checkpoint dir, or a GGUF LoRA file
	Out     string   // output directory for the Modelfile
	Params  []string // key=value → PARAMETER key value
	Force   bool     // write even when the architecture is known to be unsupported
}

// ollamaExportResult says what was written.
type ollamaExportResult struct {
	Modelfile    string // path of the written Modelfile
	Adapter      string // absolute adapter path used for ADAPTER
	Format       string // "peft" or "gguf"
	AdapterBase  string // base_model_name_or_path of a PEFT adapter ("" for GGUF)
	Architecture string // detected architecture of the adapter's base model ("" if unknown)
}

func newExportOllamaCmd() *cobra.Command {
	var (
		opts                       ollamaExport
		name, run, which, ckptRoot string
	)
	cmd := &cobra.Command{
		Use:   "ollama --base MODEL --adapter DIR --out DIR",
		Short: "Write an Ollama Modelfile (FROM base, ADAPTER trained LoRA) for a trained rewriter",
		Long: `Writes OUT/Modelfile with "FROM <base>" and "ADAPTER <adapter>", so that a
rewriter trained by the reference LoRA server (scripts/lora_trainer) can be
served by Ollama and evaluated with  himes eval --rewriter ollama:<name>.

--adapter is a PEFT adapter directory (adapter_config.json +
adapter_model.safetensors), a lora_trainer checkpoint directory (its adapter/
subdirectory is used), or a GGUF LoRA file. Instead of --adapter, --run RUN
--checkpoint best|latest --checkpoint-dir DIR picks the run's best (see
grpo.best_metric) or latest checkpoint in the LoRA server's --checkpoint-dir.

` + ollamaNote,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := resolveExportAdapter(&opts, run, which, ckptRoot); err != nil {
				return err
			}
			res, err := exportOllama(opts)
			if err != nil {
				return err
			}
			slog.Info("wrote Ollama Modelfile", "path", res.Modelfile, "adapter", res.Adapter,
				"format", res.Format, "architecture", res.Architecture)
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "wrote %s\n\nnext:\n  ollama create %s -f %s\n  himes eval --config CONFIG --rewriter ollama:%s\n",
				res.Modelfile, name, res.Modelfile, name)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Base, "base", "", "FROM: the Ollama model (or path) the adapter was trained on, e.g. qwen2.5:1.5b-instruct-fp16")
	fl.StringVar(&opts.Adapter, "adapter", "", "PEFT adapter dir, lora_trainer checkpoint dir, or GGUF LoRA file")
	fl.StringVar(&opts.Out, "out", "", "directory to write the Modelfile into (created if missing)")
	fl.StringArrayVar(&opts.Params, "param", nil, "extra PARAMETER as key=value, e.g. --param temperature=0 (repeatable)")
	fl.BoolVar(&opts.Force, "force", false, "write the Modelfile even if Ollama cannot load this adapter's architecture")
	fl.StringVar(&name, "name", "himes-rewriter", "model name used in the printed next steps")
	fl.StringVar(&run, "run", "", "a training run directory whose checkpoint (--checkpoint) to export instead of --adapter")
	fl.StringVar(&which, "checkpoint", "latest", "with --run: best (grpo.best_metric's) or latest")
	fl.StringVar(&ckptRoot, "checkpoint-dir", "", "with --run: the LoRA server's --checkpoint-dir, holding the run's trainer checkpoints")
	for _, f := range []string{"base", "out"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

// resolveExportAdapter sets o.Adapter from --run/--checkpoint/--checkpoint-dir
// when --run is given (then --adapter must not be), and checks that one of
// the two ways names the adapter.
func resolveExportAdapter(o *ollamaExport, run, which, root string) error {
	if run == "" {
		if o.Adapter == "" {
			return errors.New("--adapter: is required (or --run with --checkpoint-dir)")
		}
		return nil
	}
	if o.Adapter != "" {
		return errors.New("--adapter and --run: give one (--run picks the adapter from the run's checkpoint)")
	}
	if which != "best" && which != "latest" {
		return fmt.Errorf("--checkpoint %q: want best or latest", which)
	}
	if root == "" {
		return errors.New("--checkpoint-dir: is required with --run (the LoRA server's --checkpoint-dir)")
	}
	name, _, err := runCheckpoint(run, which)
	if err != nil {
		return err
	}
	o.Adapter = filepath.Join(root, name)
	return nil
}

// peftAdapterConfig is the part of PEFT's adapter_config.json we check.
type peftAdapterConfig struct {
	PeftType      string `json:"peft_type"`
	BaseModel     string `json:"base_model_name_or_path"`
	Backend       string `json:"backend"` // set by lora_trainer's tiny backend only
	Rank          int    `json:"r"`
	TargetModules any    `json:"target_modules"`
}

// exportOllama validates the adapter and writes the Modelfile.
func exportOllama(o ollamaExport) (ollamaExportResult, error) {
	var res ollamaExportResult
	if strings.TrimSpace(o.Base) == "" {
		return res, errors.New("--base: is required (the Ollama model the adapter was trained on)")
	}
	if strings.ContainsAny(o.Base, "\n\r") {
		return res, fmt.Errorf("--base %q: must be one line", o.Base)
	}
	if o.Out == "" {
		return res, errors.New("--out: is required")
	}
	params, err := parseModelfileParams(o.Params)
	if err != nil {
		return res, err
	}
	adapter, err := filepath.Abs(o.Adapter)
	if err != nil {
		return res, fmt.Errorf("--adapter %q: %w", o.Adapter, err)
	}
	st, err := os.Stat(adapter)
	if err != nil {
		return res, fmt.Errorf("--adapter: %w", err)
	}
	if !st.IsDir() {
		if !strings.EqualFold(filepath.Ext(adapter), ".gguf") {
			return res, fmt.Errorf("--adapter %s: a file must be a GGUF LoRA (.gguf); otherwise pass the PEFT adapter directory", adapter)
		}
		res.Format = "gguf"
	} else {
		// A lora_trainer checkpoint keeps the PEFT adapter in adapter/.
		if _, err := os.Stat(filepath.Join(adapter, "adapter", "adapter_config.json")); err == nil {
			adapter = filepath.Join(adapter, "adapter")
		}
		cfg, err := readPEFTConfig(adapter)
		if err != nil {
			return res, err
		}
		res.Format, res.AdapterBase = "peft", cfg.BaseModel
		res.Architecture = detectArchitecture(cfg.BaseModel)
		switch res.Architecture {
		case "llama", "mistral", "gemma2":
		case "":
			slog.Warn("cannot tell the adapter's base architecture; Ollama converts PEFT adapters only for llama, mistral and gemma2",
				"base_model_name_or_path", cfg.BaseModel)
		default:
			if !o.Force {
				return res, fmt.Errorf("--adapter %s: trained on %s (architecture %s); Ollama cannot convert PEFT adapters of this architecture. "+
					"Convert it to a GGUF LoRA with llama.cpp's convert_lora_to_gguf.py (--base pointing at the base model) and pass the .gguf file as --adapter, or use --force",
					adapter, cfg.BaseModel, res.Architecture)
			}
			slog.Warn("writing a Modelfile Ollama will likely refuse (--force)", "architecture", res.Architecture)
		}
	}
	res.Adapter = adapter

	mf := parser.Modelfile{Commands: append([]parser.Command{
		{Name: "model", Args: o.Base},
		{Name: "adapter", Args: adapter},
	}, params...)}
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by `himes export ollama`: the rewriter trained with LoRA on top of its base model.\n")
	if res.AdapterBase != "" {
		fmt.Fprintf(&b, "# The adapter was trained on %s; FROM must be that same model.\n", res.AdapterBase)
	}
	for _, line := range strings.Split(ollamaNote, "\n") {
		fmt.Fprintf(&b, "# %s\n", line)
	}
	b.WriteString(mf.String())

	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return res, fmt.Errorf("--out: %w", err)
	}
	res.Modelfile = filepath.Join(o.Out, "Modelfile")
	if err := atomicfile.Write(res.Modelfile, 0o644, func(w io.Writer) error {
		_, err := io.WriteString(w, b.String())
		return err
	}); err != nil {
		return res, fmt.Errorf("write %s: %w", res.Modelfile, err)
	}
	return res, nil
}

// readPEFTConfig reads and checks dir/adapter_config.json.
func readPEFTConfig(dir string) (peftAdapterConfig, error) {
	var cfg peftAdapterConfig
	path := filepath.Join(dir, "adapter_config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("--adapter %s: not a PEFT adapter directory: %w", dir, err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	if cfg.Backend == "tiny" {
		return cfg, fmt.Errorf("%s: an adapter of lora_trainer's tiny test backend; only --backend hf adapters can be served by Ollama", path)
	}
	if !strings.EqualFold(cfg.PeftType, "LORA") {
		return cfg, fmt.Errorf("%s: peft_type %q, want LORA", path, cfg.PeftType)
	}
	if _, err := os.Stat(filepath.Join(dir, "adapter_model.safetensors")); err != nil {
		return cfg, fmt.Errorf("--adapter %s: no adapter_model.safetensors (Ollama reads safetensors adapters only): %w", dir, err)
	}
	return cfg, nil
}

// detectArchitecture names the architecture of a base model: config.json's
// model_type when base is a local model directory, else a guess from the
// hub name. "" when unknown.
func detectArchitecture(base string) string {
	if raw, err := os.ReadFile(filepath.Join(base, "config.json")); err == nil {
		var c struct {
			ModelType string `json:"model_type"`
		}
		if json.Unmarshal(raw, &c) == nil && c.ModelType != "" {
			return c.ModelType
		}
	}
	n := strings.ToLower(filepath.Base(base))
	switch {
	case strings.Contains(n, "qwen3"):
		return "qwen3"
	case strings.Contains(n, "qwen"):
		return "qwen2"
	case strings.Contains(n, "gemma-2") || strings.Contains(n, "gemma2"):
		return "gemma2"
	case strings.Contains(n, "gemma"):
		return "gemma"
	case strings.Contains(n, "mistral"):
		return "mistral"
	case strings.Contains(n, "llama"):
		return "llama"
	}
	return ""
}

// modelfileCommands are Modelfile instructions that --param must not imitate.
var modelfileCommands = map[string]bool{"from": true, "model": true, "adapter": true, "license": true,
	"template": true, "system": true, "message": true, "parameter": true}

func parseModelfileParams(kvs []string) ([]parser.Command, error) {
	var out []parser.Command
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok || k == "" || v == "":
			return nil, fmt.Errorf("--param %q: want key=value, e.g. temperature=0", kv)
		case modelfileCommands[strings.ToLower(k)] || strings.ContainsAny(k, " \t"):
			return nil, fmt.Errorf("--param %q: %q is not a parameter name", kv, k)
		case strings.ContainsAny(v, "\n\r"):
			return nil, fmt.Errorf("--param %q: value must be one line", kv)
		}
		out = append(out, parser.Command{Name: k, Args: v})
	}
	return out, nil
}
