package main

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/export"
	"github.com/himes-rl/himes/grpo"
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
	)
	cmd := &cobra.Command{
		Use:   "ollama --base MODEL --adapter DIR --out DIR",
		Short: "Write an Ollama Modelfile (FROM base, ADAPTER trained LoRA) for a trained rewriter",
		Long: `Writes OUT/Modelfile with "FROM <base>" and "ADAPTER <adapter>", so that a
rewriter trained by the reference LoRA server (scripts/lora_trainer) can be
served by Ollama and evaluated with  himes eval --rewriter ollama:<name>.
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

` + export.OllamaNote,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := resolveExportAdapter(&opts, run, which, ckptRoot); err != nil {
				return err
			}
			res, err := export.WriteOllama(opts)
			if err != nil {
				return err
			}
			slog.Info("wrote Ollama Modelfile", "path", res.Modelfile, "adapter", res.Adapter,
				"format", res.Format, "architecture", res.Architecture, "checkpoint", opts.Checkpoint)
			w := cmd.OutOrStdout()
			if opts.Checkpoint != "" {
				fmt.Fprintf(w, "checkpoint %s\n", opts.Checkpoint)
			}
			fmt.Fprintf(w, "wrote %s\n\nnext:\n  ollama create %s -f %s\n  himes eval --config CONFIG --rewriter ollama:%s\n",
				res.Modelfile, name, res.Modelfile, name)
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
