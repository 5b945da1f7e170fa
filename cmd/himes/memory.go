package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/memory"
	"github.com/himes-rl/himes/retrieval"
)

func newMemoryCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "memory", Short: "Build and inspect long-term memory partitions"}
	cmd.AddCommand(newMemoryBuildCmd(), newMemoryShowCmd())
	return cmd
}

func newMemoryBuildCmd() *cobra.Command {
	var (
		cf        configFlags
		from, out string
		userField string
		format    string
	)
	cmd := &cobra.Command{
		Use:   "build --from FILE --out partitions.parquet",
		Short: "Embed, classify (topic/subtopic) and persist users' historical queries",
		Long: `Builds HiMeS long-term memory: every historical query of every user is
embedded with the configured embedder, assigned a topic and subtopic of the
taxonomy (retrieval.memory.classifier: embedding-nearest label, or an Ollama
LLM constrained to the labels), and written as Parquet partitions.

--from is either conversations (the normalized turn schema; each turn's
question is a memory of its user, in conversation and turn order, and with
data.memory_field set so are the user's statements the turns carry) or a
JSONL of memories {"user", "id", "text", "time", "topic", "subtopic",
"importance", "entities"} (only user and text are required; "query" is
accepted for text; time: RFC 3339 or Unix seconds). --format auto tells them
apart by the first record.

Use the same --config (embedder, taxonomy) for search and training: memories
from another embedder or taxonomy are refused when loaded.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			full, err := cf.loadOrDefaults()
			if err != nil {
				return err
			}
			cfg, kb := full.Retrieval, full.Data.KB
			load := full.Data.LoadOptions()
			if !cmd.Flags().Changed("user-field") && full.Data.UserField != "" {
				userField = full.Data.UserField
			}
			load.UserField = userField
			if err := refuseOutputOverInput("--out", out, from); err != nil {
				return err
			}
			entries, err := readMemoryEntries(cmd, from, format, load)
			if err != nil {
				return err
			}
			// retrieval.ollama_url "launch": the embedder's Ollama server,
			// its log beside the output.
			cfg, lo, err := launchOllamaFor(cmd, cfg, filepath.Clean(out)+"."+ollamaLogName)
			if err != nil {
				return err
			}
			defer func() { err = lo.finish(err) }()
			emb, err := memoryEmbedder(cmd, cfg, kb)
			if err != nil {
				return err
			}
			prog := newStageProgress(progressOutput(cmd), "memory build", map[string]string{"embed": "entry", "classify": "entry"})
			defer prog.finish()
			m, err := memory.Build(cmd.Context(), cfg.Memory, emb, entries, memory.WithProgress(prog.update))
			if err != nil {
				return err
			}
			if err := memory.Save(cmd.Context(), out, m); err != nil {
				return err
			}
			users := map[string]bool{}
			labels := map[string]int{}
			for _, e := range m.Entries() {
				users[e.User] = true
				labels[e.Topic+"/"+e.Subtopic]++
			}
			slog.Info("memory written", "file", out, "memories", m.Len(), "users", len(users), "labels", len(labels), "embedder", emb.Name())
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d memories of %d users in %d partitions (embedder %s)\n",
				out, m.Len(), len(users), len(labels), emb.Name())
			for _, kv := range topCounts(labels, 8) {
				fmt.Fprintf(cmd.OutOrStdout(), "  %-28s %d\n", kv.k, kv.n)
			}
			return nil
		},
	}
	cf.register(cmd, false)
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "conversations (JSONL/Parquet) or JSONL of {user, query, time} (required)")
	f.StringVar(&out, "out", "", "output Parquet file (required)")
	f.StringVar(&userField, "user-field", "conv_id", "for conversations: what identifies a user (conv_id, topic, meta.<key>)")
	f.StringVar(&format, "format", "auto", "auto, conversations or memories")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// memoryEmbedder is the memory's configured embedder (retrieval.memory.embedder,
// else retrieval.embedder); the LSA embedder comes from the knowledge base's
// pipeline (fitted, or loaded from retrieval.index).
func memoryEmbedder(cmd *cobra.Command, cfg retrieval.Config, kb string) (embedding.Embedder, error) {
	cfg = cfg.ForMemory()
	if cfg.Embedder != "lsa" {
		return retrieval.NewEmbedder(cfg)
	}
	if kb == "" {
		return nil, fmt.Errorf("embedder lsa is fitted on the knowledge base: give a --config with data.kb")
	}
	cfg.Memory.Enabled, cfg.Memory.Partitions = false, ""
	p, err := retrieval.Open(cmd.Context(), cfg, kb)
	if err != nil {
		return nil, err
	}
	return p.Embedder()
}

type labelCount struct {
	k string
	n int
}

func topCounts(m map[string]int, n int) []labelCount {
	var out []labelCount
	for k, v := range m {
		out = append(out, labelCount{k, v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].n != out[j].n {
			return out[i].n > out[j].n
		}
		return out[i].k < out[j].k
	})
	return out[:min(n, len(out))]
}

// readMemoryEntries loads memories from conversations (their users' facts
// and questions) or from a JSONL of memories.
func readMemoryEntries(cmd *cobra.Command, path, format string, load datasets.LoadOptions) ([]memory.Entry, error) {
	if format == "auto" {
		var err error
		if format, err = sniffMemoryFormat(path); err != nil {
			return nil, err
		}
	}
	switch format {
	case "conversations":
		turns, _, err := datasets.LoadContext(cmd.Context(), path, load)
		if err != nil {
			return nil, err
		}
		entries, err := memoryEntries(turns)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return entries, nil
	case "memories", "queries":
		return memory.ReadJSONL(path)
	default:
		return nil, fmt.Errorf("memory build: --format %q: want auto, conversations or memories", format)
	}
}

func sniffMemoryFormat(path string) (string, error) {
	if !strings.HasSuffix(strings.ToLower(path), ".jsonl") {
		return "conversations", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("memory build: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &keys); err != nil {
			return "", fmt.Errorf("%s:1: %w", path, err)
		}
		if _, ok := keys["conv_id"]; ok {
			return "conversations", nil
		}
		return "memories", nil
	}
	return "", fmt.Errorf("memory build: %s is empty", path)
}

func newMemoryShowCmd() *cobra.Command {
	var (
		cf   configFlags
		user string
	)
	cmd := &cobra.Command{
		Use:   "show FILE",
		Short: "Print a memory file's partitions (per user, or for --user)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			full, err := cf.loadOrDefaults()
			if err != nil {
				return err
			}
			cfg, kb := full.Retrieval, full.Data.KB
			// retrieval.ollama_url "launch": the embedder's Ollama server
			// (its log a temporary file, kept only on failure).
			cfg, lo, err := launchOllamaFor(cmd, cfg, "")
			if err != nil {
				return err
			}
			defer func() { err = lo.finish(err) }()
			emb, err := memoryEmbedder(cmd, cfg, kb)
			if err != nil {
				return err
			}
			m, err := memory.Load(cmd.Context(), args[0], cfg.Memory, emb)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			byUser := map[string][]memory.Entry{}
			var users []string
			all := map[string]bool{}
			for _, e := range m.Entries() {
				all[e.User] = true
				if user != "" && e.User != user {
					continue
				}
				if byUser[e.User] == nil {
					users = append(users, e.User)
				}
				byUser[e.User] = append(byUser[e.User], e)
			}
			sort.Strings(users)
			if user != "" && len(users) == 0 {
				// Most likely a mistyped id: say so rather than print an
				// empty listing that reads as "this user has no memories".
				some := slices.Sorted(maps.Keys(all))
				if len(some) > 3 {
					some = append(some[:3], "…")
				}
				return fmt.Errorf("memory show: %s has no user %q; it has %d: %s", args[0], user, len(all), strings.Join(some, ", "))
			}
			shown := "users"
			if len(users) == 1 {
				shown = "user"
			}
			fmt.Fprintf(w, "%s: %d memories, %d %s shown (embedder %s)\n", args[0], m.Len(), len(users), shown, emb.Name())
			for _, u := range users {
				fmt.Fprintf(w, "user %s\n", u)
				for _, e := range byUser[u] {
					fmt.Fprintf(w, "  %-26s %-12s %s\n", e.Topic+"/"+e.Subtopic, e.ID, e.Text)
				}
			}
			return nil
		},
	}
	cf.register(cmd, false)
	cmd.Flags().StringVar(&user, "user", "", "show only this user")
	return cmd
}
