package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/evaluate/ir"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/internal/progress"
	"github.com/himes-rl/himes/memory"
	"github.com/himes-rl/himes/retrieval"
)

// searchFlags are the options of `himes search`.
type searchFlags struct {
	cf         configFlags
	kb         string
	index      string
	method     string
	memory     string
	user       string
	query      string
	topK       int
	candidates int
	asJSON     bool
	trecRun    string
	queries    string
	field      string
	tag        string
	relevant   []string
	turn       string
}

func newSearchCmd() *cobra.Command {
	var sf searchFlags
	cmd := &cobra.Command{
		Use:   `search [--config X | --kb FILE] "query"`,
		Short: "Retrieve for a query and show the ranking (debugging), or write a TREC run",
		Long: `Runs the retrieval pipeline of a run config (or the defaults with --kb) on
one query and shows the first-stage candidates, the activated long-term
memories and the final ranking with scores. The positional text is what is
retrieved for (the rewrite); --query is the user's original query used to
activate memory (default: the same text).

With --trec-run FILE --queries FILE.jsonl it retrieves for every line and
writes a standard TREC run (passage level: the final top-k, then the other
candidates; each passage at its best position). A line is either
{"qid", "text"[, "query", "user"]} or a conversation turn
{"conv_id", "turn", "question", "rewrite"} (qid = conv_id_turn; --field picks
rewrite or question).

--turn CONV#N searches a turn of the config's data (data.train, data.eval)
as the pipeline sees it: the user's memory is built from the data (their
facts and the questions they asked before the turn; see data.memory_field),
the text is the positional argument or else the turn's question, and the
turn's labelled relevant memories (data.memory_labels_field) are marked in
the list of activated memories. --relevant names relevant memory ids by hand.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSearch(cmd, &sf, args)
		},
	}
	sf.cf.register(cmd, false)
	f := cmd.Flags()
	f.StringVar(&sf.kb, "kb", "", "knowledge base (overrides data.kb of --config)")
	f.StringVar(&sf.index, "index", "", "persisted index directory (overrides retrieval.index)")
	f.StringVar(&sf.method, "method", "", "bm25, dense, hybrid, remote or elasticsearch (overrides retrieval.method)")
	f.StringVar(&sf.memory, "memory", "", "memory partitions (Parquet from `himes memory build`); enables memory")
	f.StringVar(&sf.user, "user", "", "user whose long-term memory is activated")
	f.StringVar(&sf.query, "query", "", "the user's original query for memory activation (default: the searched text)")
	f.IntVar(&sf.topK, "k", 0, "final top-k (overrides retrieval.top_k; 0: the config's)")
	f.IntVar(&sf.candidates, "candidates", 0, "first-stage candidates (overrides retrieval.candidates; 0: the config's)")
	f.BoolVar(&sf.asJSON, "json", false, "print the result with its trace as JSON")
	f.StringVar(&sf.trecRun, "trec-run", "", "write a TREC run for --queries to this file")
	f.StringVar(&sf.queries, "queries", "", "JSONL of queries for --trec-run")
	f.StringVar(&sf.field, "field", "rewrite", "for conversation turns: rewrite (falls back to question) or question")
	f.StringVar(&sf.tag, "tag", "himes", "run tag written in the TREC run")
	f.StringSliceVar(&sf.relevant, "relevant", nil, "ids of the memories labelled relevant (marked in the output)")
	f.StringVar(&sf.turn, "turn", "", "search this turn (conv_id#turn) of the config's data with its user's causal memory and labels")
	return cmd
}

func (sf *searchFlags) config() (retrieval.Config, string, error) {
	full, err := sf.cf.loadOrDefaults()
	if err != nil {
		return full.Retrieval, "", err
	}
	cfg, kb := full.Retrieval, full.Data.KB
	if sf.kb != "" {
		kb = sf.kb
	}
	if sf.index != "" {
		cfg.Index = sf.index
	}
	if sf.method != "" {
		cfg.Method = sf.method
	}
	if kb == "" && !cfg.UsesService() {
		return cfg, "", fmt.Errorf("search: need --kb or a --config with data.kb")
	}
	if sf.memory != "" {
		cfg.Memory.Enabled, cfg.Memory.Partitions = true, sf.memory
	}
	if sf.topK < 0 || sf.candidates < 0 {
		return cfg, "", fmt.Errorf("search: --k and --candidates must be ≥ 0 (0: the config's), got %d and %d", sf.topK, sf.candidates)
	}
	if sf.topK > 0 {
		cfg.TopK = sf.topK
	}
	if sf.candidates > 0 {
		cfg.Candidates = sf.candidates
	}
	if cfg.Candidates < cfg.TopK {
		cfg.Candidates = cfg.TopK
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", fmt.Errorf("search: %w", err)
	}
	return cfg, kb, nil
}

func runSearch(cmd *cobra.Command, sf *searchFlags, args []string) (err error) {
	if (sf.trecRun == "") != (sf.queries == "") {
		return fmt.Errorf("search: --trec-run and --queries go together")
	}
	if sf.trecRun == "" && len(args) != 1 && sf.turn == "" {
		return fmt.Errorf("search: give one query (or --turn, or --trec-run with --queries)")
	}
	if sf.field != "rewrite" && sf.field != "question" {
		return fmt.Errorf("search: --field %q: want rewrite or question", sf.field)
	}
	cfg, kb, err := sf.config()
	if err != nil {
		return err
	}
	// The queries and --turn's requirements are checked before the index
	// is loaded (minutes for a large one).
	var qs []ir.RunQuery
	if sf.trecRun != "" {
		if qs, err = ir.ReadRunQueries(sf.queries, sf.field); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Dir(sf.trecRun)); err != nil {
			return fmt.Errorf("search: --trec-run: %w", err)
		}
		if err := refuseOutputOverInput("--trec-run", sf.trecRun, sf.queries, kb); err != nil {
			return fmt.Errorf("search: %w", err)
		}
	}
	if sf.turn != "" {
		if sf.cf.path == "" {
			return fmt.Errorf("search: --turn needs --config (its data)")
		}
		if !cfg.Memory.Enabled {
			return fmt.Errorf("search: --turn shows long-term memory: set retrieval.memory.enabled or --memory")
		}
	}
	// retrieval.ollama_url "launch": the embedder's Ollama server, its log
	// beside the TREC run, or a temporary file kept only on failure.
	ollamaLog := ""
	if sf.trecRun != "" {
		ollamaLog = sf.trecRun + "." + ollamaLogName
	}
	cfg, lo, err := launchOllamaFor(cmd, cfg, ollamaLog)
	if err != nil {
		return err
	}
	defer func() { err = lo.finish(err) }()
	p, err := retrieval.Open(cmd.Context(), cfg, kb)
	if err != nil {
		return err
	}
	if sf.trecRun != "" {
		return writeTRECRun(cmd, p, sf, qs)
	}
	var ret retrieval.Retriever = p
	relevant := sf.relevant
	text, user, original := "", sf.user, sf.query
	if len(args) == 1 {
		text = args[0]
	}
	if sf.turn != "" {
		t, causal, err := searchTurn(cmd, sf, p)
		if err != nil {
			return err
		}
		ret, user, original = causal, t.User, t.Question
		relevant = append(relevant, t.MemoryLabels...)
		if text == "" {
			text = t.Question
		}
	}
	if original == "" {
		original = text
	}
	res, err := ret.Retrieve(cmd.Context(), user, text, original)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if sf.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	// A user the store lacks activates nothing, which alone reads as "no
	// memory was similar enough".
	unknownUser := sf.turn == "" && p.Memory() != nil && !p.Memory().HasUser(user)
	printSearch(w, p, cfg, user, unknownUser, res, relevant)
	return nil
}

// searchTurn finds --turn in the config's data and attaches the data's
// memory to p, returning the turn and the causal view.
func searchTurn(cmd *cobra.Command, sf *searchFlags, p *retrieval.Pipeline) (datasets.Turn, *retrieval.CausalRetriever, error) {
	full, err := sf.cf.load()
	if err != nil {
		return datasets.Turn{}, nil, err
	}
	var turns []datasets.Turn
	for _, path := range []string{full.Data.Train, full.Data.Eval} {
		if path == "" {
			continue
		}
		ts, _, err := datasets.LoadContext(cmd.Context(), path, full.Data.LoadOptions())
		if err != nil {
			return datasets.Turn{}, nil, err
		}
		turns = append(turns, ts...)
	}
	turns = dedupTurns(turns)
	i := slices.IndexFunc(turns, func(t datasets.Turn) bool { return t.ID() == sf.turn })
	if i < 0 {
		return datasets.Turn{}, nil, fmt.Errorf("search: --turn %q: no such turn in data.train or data.eval (ids are conv_id#turn)", sf.turn)
	}
	entries, err := memoryEntries(turns)
	if err != nil {
		return datasets.Turn{}, nil, err
	}
	causal, err := retrieval.AttachMemory(cmd.Context(), p.Config().Memory, p, entries)
	if err != nil {
		return datasets.Turn{}, nil, err
	}
	return turns[i], causal, nil
}

func printSearch(w io.Writer, p *retrieval.Pipeline, cfg retrieval.Config, user string, unknownUser bool, res retrieval.Result, relevant []string) {
	fmt.Fprintf(w, "retrieved (%s, %d candidates):\n", cfg.Method, len(res.Trace.Candidates))
	for i, c := range res.Trace.Candidates {
		ch, _ := p.Chunk(c.ID)
		fmt.Fprintf(w, "  %2d. %-24s %9.4f  %s\n", i+1, c.ID, c.Score, snippet(ch, 90))
	}
	switch {
	case !cfg.Memory.Enabled:
		fmt.Fprintln(w, "long-term memory: off")
	case p.Memory() == nil:
		fmt.Fprintln(w, "long-term memory: on, but no memory store loaded (--memory FILE)")
	default:
		fmt.Fprintf(w, "activated memories (user %q, %d; score, cosine):\n", user, len(res.Trace.Memories))
		if unknownUser {
			fmt.Fprintf(w, "  none: the memory store has no user %q (check --user; users are data.user_field's values when it was built)\n", user)
		}
		for i, m := range res.Trace.Memories {
			mark := ""
			if len(relevant) > 0 {
				mark = "   "
				if slices.Contains(relevant, m.ID) {
					mark = "R  "
				}
			}
			fmt.Fprintf(w, "  %2d. %s%.4f %.4f  %-26s %-10s %s\n", i+1, mark, m.Score, m.Sim, m.Topic+"/"+m.Subtopic, m.ID, m.Text)
		}
		if len(relevant) > 0 {
			p, r, rr := evaluate.MemoryActivation(memoryIDs(res.Trace.Memories), relevant)
			fmt.Fprintf(w, "  R = labelled relevant (%s): precision %.3f, recall %.3f, reciprocal rank %.3f\n", strings.Join(relevant, ", "), p, r, rr)
		}
	}
	how := "retrieval order"
	switch {
	case res.Trace.Reranked && cfg.Memory.RetrievalWeight > 0:
		how = fmt.Sprintf("memory re-rank: mean cosine with H_n, fused with retrieval (w=%v)", cfg.Memory.RetrievalWeight)
	case res.Trace.Reranked:
		how = "memory re-rank: mean cosine with H_n"
	case len(res.Trace.Memories) > 0:
		how = fmt.Sprintf("retrieval order: no activated memory reaches cosine %v with the query", cfg.Memory.RerankFloor)
	}
	fmt.Fprintf(w, "final ranking (%s):\n", how)
	for i, c := range res.Chunks {
		fmt.Fprintf(w, "  %2d. %-24s %9.4f  %s\n", i+1, c.ID, c.Score, snippet(c.Chunk, 90))
	}
}

func memoryIDs(ms []memory.Activated) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func snippet(c retrieval.Chunk, n int) string {
	s := strings.Join(strings.Fields(c.Text), " ")
	if c.Title != "" {
		s = "[" + c.Title + "] " + s
	}
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

func writeTRECRun(cmd *cobra.Command, p *retrieval.Pipeline, sf *searchFlags, qs []ir.RunQuery) error {
	// Written whole or not at all: a run cut short by a failed query would
	// score as if the missing queries had retrieved nothing.
	bar := progress.New(progressOutput(cmd), progress.Options{Label: "search", Unit: "query", Total: len(qs)})
	defer bar.Finish()
	err := atomicfile.Write(sf.trecRun, 0o644, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		for i, q := range qs {
			res, err := p.Retrieve(cmd.Context(), q.User, q.Text, q.Query)
			if err != nil {
				return fmt.Errorf("query %s: %w", q.QID, err)
			}
			if err := ir.WriteTRECRun(bw, q.QID, p.PassageRanking(res), sf.tag); err != nil {
				return err
			}
			bar.Update(i+1, "")
		}
		return bw.Flush()
	})
	if err != nil {
		return err // names the file and the query
	}
	slog.Info("trec run written", "file", sf.trecRun, "queries", len(qs))
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%d queries)\n", sf.trecRun, len(qs))
	return nil
}
