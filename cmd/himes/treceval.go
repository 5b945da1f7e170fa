package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/evaluate/ir"
)

func newTRECEvalCmd() *cobra.Command {
	var (
		perQuery, complete bool
		measures           []string
	)
	cmd := &cobra.Command{
		Use:   "trec-eval QRELS RUN",
		Short: "Score a TREC run file against qrels, as trec_eval does",
		Long: `Scores any TREC run ("qid Q0 docno rank score tag" per line, e.g. one written
by himes search --trec or by Pyserini) against TREC qrels ("qid iter docno
relevance"), the way trec_eval 10 reads and scores them: lines starting with #
are comments, fields after the run's tag are ignored, a docno given twice for
one query is an error; documents are ranked by score, ties by docno
descending; relevance ≥ 1 is relevant and is ndcg's gain. Queries of the run
without judgments are skipped; with -c every judged query counts, those the
run misses scoring 0.

Output is trec_eval's: "measure<TAB>qid<TAB>value" lines, per query with -q,
then runid and the means over queries ("all"; counts are sums).

Measures (-m, repeatable, trec_eval's syntax): num_q, num_ret, num_rel,
num_rel_ret, map, recip_rank, ndcg, P.k, recall.k, ndcg_cut.k, where k is a
comma-separated list of cutoffs (recall.10,100). Default: num_q num_ret
num_rel num_rel_ret map recip_rank P.5,10 recall.10,100 ndcg_cut.3,10.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(measures) == 0 {
				measures = ir.DefaultTRECMeasures
			}
			ms, err := ir.ParseTRECMeasures(measures)
			if err != nil {
				return fmt.Errorf("-m: %w", err)
			}
			qf, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("trec-eval: %w", err)
			}
			defer qf.Close()
			qrels, err := ir.ParseQrels(qf, args[0])
			if err != nil {
				return err
			}
			rf, err := os.Open(args[1])
			if err != nil {
				return fmt.Errorf("trec-eval: %w", err)
			}
			defer rf.Close()
			run, err := ir.ReadTRECRun(rf, args[1])
			if err != nil {
				return err
			}
			res := ir.TRECEval(run.Queries, qrels, ms, complete)
			if len(res.Queries) == 0 {
				return fmt.Errorf("trec-eval: no query of %s is judged in %s", args[1], args[0])
			}
			if err := ir.WriteTRECEval(cmd.OutOrStdout(), res, perQuery, run.RunID); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&perQuery, "per-query", "q", false, "print every query's measures before the means (trec_eval -q)")
	f.BoolVarP(&complete, "complete", "c", false, "average over every judged query; those missing from the run score 0 (trec_eval -c)")
	f.StringArrayVarP(&measures, "measure", "m", nil, "measure to print, trec_eval syntax (recall.10,100); repeatable")
	return cmd
}
