package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/trainer"
	"github.com/himes-rl/himes/trainer/conformance"
	"github.com/himes-rl/himes/trainer/embedded"
)

// trainerTokenEnv is read when --token is not given.
const trainerTokenEnv = "HIMES_TRAINER_TOKEN"

func newTrainerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trainer",
		Short: "Serve or check a LoRA trainer endpoint",
		Long: `A trainer endpoint holds the policy and speaks the JSON-over-HTTP protocol of
trainer/PROTOCOL.md. "serve" runs the embedded pure-Go policy as an endpoint;
"check" tests any endpoint for conformance.`,
	}
	cmd.AddCommand(newTrainerServeCmd(), newTrainerCheckCmd())
	return cmd
}

func newTrainerServeCmd() *cobra.Command {
	var (
		cf      configFlags
		addr    string
		token   string
		ckptDir string
		sopts   trainer.ServerOptions
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the embedded term-selection policy over the trainer protocol",
		Long: `Serves the embedded policy (configured by the trainer.embedded section of
--config, or its defaults) on --addr until interrupted. The first line on
stdout is "serving on http://HOST:PORT" (useful with --addr 127.0.0.1:0).
When the config names a knowledge base (data.kb), the idf feature uses its
BM25 statistics, as in an in-process run of that config; otherwise it is 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sopts.ReadTimeout <= 0 {
				// 0 or less was replaced by the 2-minute default without a
				// word, as if the limit had been set; the Python trainer's
				// --read-timeout refuses it too.
				return fmt.Errorf("--read-timeout must be > 0, got %v", sopts.ReadTimeout)
			}
			cfg, err := cf.loadOrDefaults()
			if err != nil {
				return err
			}
			ecfg := cfg.Trainer.Embedded
			if ckptDir != "" {
				ecfg.CheckpointDir = ckptDir
			}
			if token == "" {
				token = os.Getenv(trainerTokenEnv)
			}
			// The port first: a busy one is reported before the knowledge
			// base is loaded.
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", addr, err)
			}
			// With a config that names a knowledge base, the idf feature uses
			// the same BM25 statistics as an in-process run of that config.
			var stats embedded.TermStats
			if cfg.Data.KB != "" {
				kb, err := retrieval.Open(cmd.Context(), cfg.Retrieval, cfg.Data.KB)
				if err != nil {
					ln.Close()
					return fmt.Errorf("knowledge-base statistics: %w", err)
				}
				stats = kb
			}
			policy, err := embedded.New(ecfg, stats)
			if err != nil {
				ln.Close()
				return err
			}
			return serveTrainer(cmd, ln, policy, token, ecfg.CheckpointDir, sopts)
		},
	}
	cf.register(cmd, false)
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8765", "listen address (host:port; port 0 picks a free one)")
	cmd.Flags().StringVar(&token, "token", "", "require this bearer token (default $"+trainerTokenEnv+"; empty = no auth)")
	cmd.Flags().StringVar(&ckptDir, "checkpoint-dir", "", "where save/load keep checkpoints (default trainer.embedded.checkpoint_dir)")
	cmd.Flags().DurationVar(&sopts.ReadTimeout, "read-timeout", trainer.DefaultReadTimeout,
		"the longest a client may take to send one request, body included (a slow client is disconnected)")
	return cmd
}

// serveTrainer serves policy on ln until the command's context ends, then
// shuts down gracefully (in-flight updates complete).
func serveTrainer(cmd *cobra.Command, ln net.Listener, policy trainer.Policy, token, ckptDir string, opts trainer.ServerOptions) error {
	if trainer.ExposedWithoutToken(ln.Addr(), token) {
		slog.Warn("the trainer endpoint listens beyond loopback without a token: anyone who can reach it can read and change the policy; set --token or $"+trainerTokenEnv,
			"addr", ln.Addr().String())
	}
	// The body's own deadlines (each 64 KiB within 10 s, the whole within
	// --read-timeout) replace the server's while it is read.
	srv := trainer.NewServer(logRequests(trainer.NewHandler(policy, token, trainer.WithBodyTimeouts(0, opts.ReadTimeout))), opts)
	return serveHTTP(cmd, ln, srv, "trainer endpoint", "policy", "embedded", "auth", token != "", "checkpoint_dir", ckptDir)
}

// serveHTTP prints "serving on URL" as the first line on stdout, serves srv
// on ln until the command's context ends, then shuts down gracefully
// (requests in flight complete).
func serveHTTP(cmd *cobra.Command, ln net.Listener, srv *http.Server, what string, attrs ...any) error {
	ctx := cmd.Context()
	url := "http://" + ln.Addr().String()
	if _, err := fmt.Fprintf(cmd.OutOrStdout(), "serving on %s\n", url); err != nil {
		ln.Close()
		return err
	}
	slog.Info(what+" up", append([]any{"url", url}, attrs...)...)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", url, err)
	case <-ctx.Done():
	}
	slog.Info(what+" shutting down", "url", url)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down %s: %w", url, err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", url, err)
	}
	return nil
}

// logRequests logs each call at debug level.
func logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h.ServeHTTP(w, r)
		slog.Debug("trainer request", "method", r.Method, "path", r.URL.Path, "took_ms", float64(time.Since(start).Microseconds())/1000)
	})
}

func newTrainerCheckCmd() *cobra.Command {
	var (
		endpoint string
		token    string
		timeout  time.Duration
		opts     conformance.Options
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check a trainer endpoint's conformance to the protocol",
		Long: `Runs every conformance property of trainer/PROTOCOL.md against --endpoint and
prints one PASS/FAIL line per property; exits non-zero if any fails.
The check updates the policy, but saves it first and loads it back at the end;
when the endpoint supports delete it also removes the checkpoints it created.
--endpoint embedded checks a fresh in-process embedded policy (checkpoints in a
temporary directory).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A bad setting of the check itself would show as the endpoint
			// failing properties.
			if !(opts.LearningRate > 0 && opts.LearningRate <= 1) {
				return fmt.Errorf("--lr must be in (0, 1], got %v", opts.LearningRate)
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout must be > 0, got %v", timeout)
			}
			ctx := cmd.Context()
			if token == "" {
				token = os.Getenv(trainerTokenEnv)
			}
			var p trainer.Policy
			if endpoint == "embedded" {
				dir, err := os.MkdirTemp("", "himes-trainer-check-")
				if err != nil {
					return fmt.Errorf("checkpoint dir: %w", err)
				}
				defer os.RemoveAll(dir)
				ecfg := trainer.DefaultEmbeddedConfig()
				ecfg.CheckpointDir = dir
				if p, err = embedded.New(ecfg, nil); err != nil {
					return err
				}
			} else {
				p = trainer.NewClient(endpoint, token, trainer.WithTimeout(timeout))
			}
			ok, err := conformance.CheckWith(ctx, p, cmd.OutOrStdout(), opts)
			if err != nil {
				return fmt.Errorf("trainer check %s: %w", endpoint, err)
			}
			if !ok {
				return fmt.Errorf("trainer check %s: the endpoint does not conform (see the FAIL lines)", endpoint)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&endpoint, "endpoint", "", `endpoint URL, e.g. http://127.0.0.1:8765, or "embedded"`)
	_ = cmd.MarkFlagRequired("endpoint")
	cmd.Flags().StringVar(&token, "token", "", "bearer token (default $"+trainerTokenEnv+")")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "timeout of each request")
	cmd.Flags().Float64Var(&opts.LearningRate, "lr", 1e-3, "learning rate of the check's updates")
	cmd.Flags().Int64Var(&opts.Seed, "seed", 1, "seed of the check's sample calls")
	cmd.Flags().StringVar(&opts.LossType, "loss-type", "", "loss type of the check's grpo steps (default grpo if supported)")
	return cmd
}
