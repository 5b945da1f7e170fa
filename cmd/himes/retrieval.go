package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/retrieval/service"
	"github.com/himes-rl/himes/trainer"
)

func newRetrievalCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "retrieval", Short: "Serve the embedded index to other processes and hosts"}
	cmd.AddCommand(newRetrievalServeCmd())
	return cmd
}

func newRetrievalServeCmd() *cobra.Command {
	var (
		cf    configFlags
		addr  string
		token string
	)
	cmd := &cobra.Command{
		Use:   "serve --config X [--addr 127.0.0.1:8000]",
		Short: "Serve a config's BM25/dense/hybrid index over Search-R1's /retrieve protocol",
		Long: `Opens the retrieval pipeline of --config (data.kb, retrieval.method bm25,
dense or hybrid, retrieval.index when set) and serves its first stage on
--addr until interrupted: POST /retrieve {"queries", "topk", "return_scores"}
answers {"result": [[{"document": {"id", "contents", ...}, "score"}]]}
(retrieval/service/PROTOCOL.md), GET /health what is served. Many rollout workers
and hosts then share one index: point their configs at it with
retrieval.method: remote and retrieval.remote.url. Long-term memory stays
with the clients (it re-ranks what the server returns), so the config's
retrieval.memory is ignored here. The first line on stdout is
"serving on http://HOST:PORT" (useful with --addr 127.0.0.1:0).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			cfg, err := cf.load()
			if err != nil {
				return err
			}
			rc := cfg.Retrieval
			if rc.UsesService() {
				return fmt.Errorf("retrieval serve: retrieval.method is %s; serve an embedded index (bm25, dense or hybrid)", rc.Method)
			}
			rc.Memory.Enabled = false
			// The port first: a busy one is reported before the index is
			// loaded. Connections wait in the backlog until it is served.
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", addr, err)
			}
			// retrieval.ollama_url "launch": the embedder's Ollama server for
			// as long as the service runs (its log a temporary file, kept
			// only on failure); a server that dies stops the service.
			rc, lo, err := launchOllamaFor(cmd, rc, "")
			if err != nil {
				ln.Close()
				return fmt.Errorf("retrieval serve: %w", err)
			}
			defer func() { err = lo.finish(err) }()
			p, err := retrieval.Open(cmd.Context(), rc, cfg.Data.KB)
			if err != nil {
				ln.Close()
				return fmt.Errorf("retrieval serve: %w", err)
			}
			// The same slow-client bounds as the trainer endpoint's server.
			if token == "" {
				token = os.Getenv(retrievalTokenEnv)
			}
			if trainer.ExposedWithoutToken(ln.Addr(), token) {
				slog.Warn("the retrieval service listens beyond loopback without a token: anyone who can reach it can query the index; set --token or $"+retrievalTokenEnv,
					"addr", ln.Addr().String())
			}
			var opts []service.HandlerOption
			if token != "" {
				opts = append(opts, service.WithToken(token))
			}
			srv := trainer.NewServer(service.NewHandler(p, rc.Candidates, opts...), trainer.ServerOptions{})
			return serveHTTP(cmd, ln, srv, "retrieval service",
				"method", rc.Method, "documents", p.NumChunks())
		},
	}
	cf.register(cmd, true)
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8000", "listen address (host:port; port 0 picks a free one)")
	cmd.Flags().StringVar(&token, "token", "", "require this bearer token (default $"+retrievalTokenEnv+"; empty = no auth); clients name its variable in retrieval.remote.token_env")
	return cmd
}

// retrievalTokenEnv is read when retrieval serve's --token is not given.
const retrievalTokenEnv = "HIMES_RETRIEVAL_TOKEN"
