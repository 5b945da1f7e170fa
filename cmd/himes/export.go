package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/export"
	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/trainer"
)

func newExportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export a trained rewriter (e.g. an Ollama Modelfile)",
	}
	cmd.AddCommand(newExportOllamaCmd())
	return cmd
}

func newExportOllamaCmd() *cobra.Command {
	var (
		opts                       export.Ollama
		name, run, which, ckptRoot string
		format, dtype, python      string
		verify                     verifyExport
		cf                         configFlags
	)
	cmd := &cobra.Command{
		Use:   "ollama --base MODEL --adapter DIR --out DIR",
		Short: "Write a trained rewriter for Ollama: one merged GGUF (default) or FROM base + ADAPTER",
		Long: `Writes OUT/Modelfile for a rewriter trained by the reference LoRA server
(scripts/lora_trainer), to be served by Ollama and evaluated with
  himes eval --rewriter ollama:<name>.

--format merged (the default): the adapter is merged into the base (the
trainer's model directory) in float32 and written as OUT/model.gguf at
--dtype f32 or f16, with the tokenizer and chat template, by the trainer
environment's Python (python -m lora_trainer.export_gguf; --python, default
the interpreter scripts/ci/python-env.sh prints). The Modelfile is FROM that
file with temperature 0, top_k 1 and repeat_penalty 1: Ollama's default
repeat_penalty 1.1 alone changes greedy rewrites. Measured faithful:
docs/LLM_ON_CPU.md, "Served = trained".

--format adapter (the older path; measured less faithful, same page):
"FROM <base>" and "ADAPTER <adapter>", converted by Ollama itself.
A PEFT adapter is copied to OUT/adapter in the form Ollama reads (an integer
lora_alpha, or the exact scale in lora_parameters.alpha), and ADAPTER names
the copy. --base is an Ollama model name, the trainer's model directory
(safetensors), or a GGUF file of the same weights. A model directory must
carry its chat template in tokenizer_config.json, where Ollama reads it.

--adapter is a PEFT adapter directory (adapter_config.json +
adapter_model.safetensors), a lora_trainer checkpoint directory (its adapter/
subdirectory is used), or a GGUF LoRA file. Instead of --adapter, --run RUN
--checkpoint best|latest --checkpoint-dir DIR picks the run's best (see
grpo.best_metric) or latest checkpoint in the LoRA server's --checkpoint-dir;
without --checkpoint, the run's final policy (the best under
grpo.load_best_at_end). The output names the checkpoint, its step and value.

` + export.OllamaNote + `

--verify-data FILE (turns as himes eval --data reads them; --config for
data.prompt and grpo.max_tokens, else the defaults) then runs "ollama
create <name>" against --ollama-host, rewrites every turn greedily with the
trainer (transformers + PEFT, float32) and with Ollama, and prints
"agreement: k/N" (identical rewrites) and the largest difference of the
first next-token logits (only with --llamalogits BIN, which computes the
served logits from the GGUF in Ollama's llama.cpp; Ollama's API has none).
It exits non-zero when k/N < --min-agreement (default 0.9: 11 of 12 pass).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := resolveExportAdapter(&opts, run, which, ckptRoot); err != nil {
				return err
			}
			if verify.data != "" && verify.host == "" {
				return errors.New("--ollama-host: is required with --verify-data (the server to create the model on)")
			}
			if verify.minAgreement < 0 || verify.minAgreement > 1 {
				return fmt.Errorf("--min-agreement %v: want a share in [0, 1]", verify.minAgreement)
			}
			if verify.maxTokens < 0 {
				return fmt.Errorf("--max-tokens %d: want ≥ 1, or 0 for the config's grpo.max_tokens", verify.maxTokens)
			}
			needPython := format == export.FormatMerged || verify.data != ""
			if needPython && python == "" {
				p, err := pythonEnv()
				if err != nil {
					return fmt.Errorf("--python: the trainer environment's interpreter: %w", err)
				}
				python = p
			}
			w := cmd.OutOrStdout()
			if opts.Checkpoint != "" {
				fmt.Fprintf(w, "checkpoint %s\n", opts.Checkpoint)
			}
			var modelfile, gguf string
			switch format {
			case export.FormatMerged:
				res, err := export.WriteOllamaMerged(cmd.Context(), opts, python, dtype)
				if err != nil {
					return err
				}
				slog.Info("wrote merged GGUF and Modelfile", "gguf", res.GGUF, "modelfile", res.Modelfile,
					"summary", res.Summary, "checkpoint", opts.Checkpoint)
				modelfile, gguf = res.Modelfile, res.GGUF
			case export.FormatAdapter:
				opts.Params = append(append([]string{}, export.GreedyParams...), opts.Params...)
				res, err := export.WriteOllama(opts)
				if err != nil {
					return err
				}
				slog.Info("wrote Ollama Modelfile", "path", res.Modelfile, "adapter", res.Adapter,
					"format", res.Format, "architecture", res.Architecture, "checkpoint", opts.Checkpoint)
				modelfile = res.Modelfile
			default:
				return fmt.Errorf("--format %q: want merged or adapter", format)
			}
			if verify.data == "" {
				fmt.Fprintf(w, "wrote %s\n\nnext:\n  ollama create %s -f %s\n  himes eval --config CONFIG --rewriter ollama:%s\n",
					modelfile, name, modelfile, name)
				return nil
			}
			cfg, err := cf.loadOrDefaults()
			if err != nil {
				return err
			}
			verify.cfg, verify.name, verify.modelfile, verify.python, verify.gguf = cfg, name, modelfile, python, gguf
			verify.base, verify.adapter = opts.Base, opts.Adapter
			verify.work = filepath.Join(opts.Out, "verify")
			r, err := verify.run(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "wrote %s; created %s\n", modelfile, name)
			for _, d := range r.Differ {
				fmt.Fprintf(w, "differs %s\n", d)
			}
			fmt.Fprintf(w, "agreement: %d/%d\n", r.Agree, r.N)
			if math.IsNaN(r.MaxLogitDiff) {
				fmt.Fprintf(w, "first-token logit difference: %s\n", r.LogitsHow)
			} else {
				fmt.Fprintf(w, "first-token max |logit difference|: %.4g (%s)\n", r.MaxLogitDiff, r.LogitsHow)
			}
			if float64(r.Agree) < verify.minAgreement*float64(r.N) {
				return fmt.Errorf("--verify-data %s: agreement %d/%d is below --min-agreement %v", verify.data, r.Agree, r.N, verify.minAgreement)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Base, "base", "", "FROM: the model the adapter was trained on: its directory, a GGUF of it, or an Ollama model name")
	fl.StringVar(&opts.Adapter, "adapter", "", "PEFT adapter dir, lora_trainer checkpoint dir, or GGUF LoRA file")
	fl.StringVar(&opts.Out, "out", "", "directory to write the Modelfile into (created if missing)")
	fl.StringArrayVar(&opts.Params, "param", nil, "extra PARAMETER as key=value, e.g. --param temperature=0 (repeatable)")
	fl.BoolVar(&opts.Force, "force", false, "write the Modelfile even where Ollama v0.6.5 refuses or mis-converts the adapter")
	fl.StringVar(&name, "name", "himes-rewriter", "model name used in the printed next steps")
	fl.StringVar(&run, "run", "", "a training run directory whose checkpoint (--checkpoint) to export instead of --adapter")
	fl.StringVar(&which, "checkpoint", "", "with --run: best (grpo.best_metric's) or latest (default: the run's final policy, best under grpo.load_best_at_end)")
	fl.StringVar(&ckptRoot, "checkpoint-dir", "", "with --run: the LoRA server's --checkpoint-dir, holding the run's trainer checkpoints")
	fl.StringVar(&format, "format", export.FormatMerged, "merged (the adapter merged into the base, one GGUF) or adapter (FROM base + ADAPTER, converted by Ollama)")
	fl.StringVar(&dtype, "dtype", "f32", "with --format merged: the GGUF's weight type, f32 or f16")
	fl.StringVar(&python, "python", "", "the trainer environment's Python (default: what scripts/ci/python-env.sh prints)")
	fl.StringVar(&verify.data, "verify-data", "", "turns (JSONL/Parquet as himes eval --data) to compare the trainer's and Ollama's greedy rewrites on")
	fl.StringVar(&verify.host, "ollama-host", "", "with --verify-data: the Ollama server, e.g. http://127.0.0.1:11434")
	fl.StringVar(&verify.llamaLogits, "llamalogits", "", "with --verify-data: the scripts/llamalogits binary, to measure the served first-token logits")
	fl.IntVar(&verify.maxTokens, "max-tokens", 0, "with --verify-data: tokens per rewrite (default: the config's grpo.max_tokens); Ollama v0.6.5 aborts a reply after one piece repeats 30 times, so keep it under 31 for degenerate models")
	fl.Float64Var(&verify.minAgreement, "min-agreement", DefaultMinAgreement, "with --verify-data: the share of identical greedy rewrites below which the command fails")
	cf.register(cmd, false)
	for _, f := range []string{"base", "out"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

// resolveExportAdapter sets o.Adapter from --run/--checkpoint/--checkpoint-dir
// when --run is given (then --adapter must not be), and checks that one of
// the two ways names the adapter.
func resolveExportAdapter(o *export.Ollama, run, which, root string) error {
	if run == "" {
		if o.Adapter == "" {
			return errors.New("--adapter: is required (or --run with --checkpoint-dir)")
		}
		return nil
	}
	if o.Adapter != "" {
		return errors.New("--adapter and --run: give one (--run picks the adapter from the run's checkpoint)")
	}
	if which != "" && which != "best" && which != "latest" {
		return fmt.Errorf("--checkpoint %q: want best or latest", which)
	}
	if err := checkRunExportable(run); err != nil {
		return err
	}
	if root == "" {
		return errors.New("--checkpoint-dir: is required with --run (the LoRA server's --checkpoint-dir)")
	}
	c, err := grpo.ResolveRunCheckpoint(run, which)
	if err != nil {
		return err
	}
	o.Adapter = filepath.Join(root, c.Name)
	o.Checkpoint = c.Label
	return nil
}

// checkRunExportable refuses a run whose policy is no language model: the
// embedded linear policy and the MiniLM tagger pick terms to add, and have
// no weights Ollama could serve. Without this the command asked for a
// --checkpoint-dir, as if one existed.
func checkRunExportable(run string) error {
	cfg, err := configs.LoadRunSnapshot(run)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no snapshot to tell by; the checkpoint lookup decides
	}
	if err != nil {
		return err
	}
	tagger := func(args []string) bool {
		for i, a := range args {
			if a == "--backend=tagger" || (a == "--backend" && i+1 < len(args) && args[i+1] == "tagger") {
				return true
			}
		}
		return false
	}
	kind := ""
	switch {
	case cfg.Trainer.Endpoint == "embedded":
		kind = "the embedded linear policy (trainer.endpoint: embedded)"
	case cfg.Trainer.Endpoint == trainer.LaunchEndpoint && tagger(cfg.Trainer.Launch.Args):
		kind = "the MiniLM tagger (trainer.launch.args: --backend tagger)"
	}
	if kind != "" {
		return fmt.Errorf("--run %s trained %s, which is not a language model: there is nothing for Ollama to serve (an LLM rewriter is trained with the reference trainer's hf backend: docs/LLM_ON_CPU.md)", run, kind)
	}
	return nil
}
