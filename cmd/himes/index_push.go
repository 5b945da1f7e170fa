package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/retrieval"
)

func newIndexPushCmd() *cobra.Command {
	var cf configFlags
	opt := retrieval.DefaultPushOptions()
	cmd := &cobra.Command{
		Use:   "push --config FILE",
		Short: "Create the config's Elasticsearch/OpenSearch index and bulk-index data.kb into it",
		Long: `Creates retrieval.elasticsearch.index on the cluster at retrieval.elasticsearch.url
with an explicit BM25 similarity (retrieval.k1, retrieval.b) and an analyzer
reproducing retrieval.analyzer (plain or lucene-english), then indexes the
passages of data.kb in _bulk batches: one document per passage, _id and the
keyword field "id" holding the passage id, the text field holding
"Title"\ntext. Rejected bulk items are sent again; at the end every shard
copy must count every passage, and only then is the index marked complete
(in its mapping's _meta.himes), which the elasticsearch backend checks before
a run searches it.

An existing index is never overwritten unless an earlier push made it (its
_meta.himes says so) and --replace is given; one that already holds this KB
with these settings is left alone. One shard is the default: BM25 statistics
are per shard, so several shards rank like the embedded index only when
searched with dfs_query_then_fetch. Set retrieval.elasticsearch.id_field: id
so that equal scores are ordered by id, as in the embedded index.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := cf.load()
			if err != nil {
				return err
			}
			if cfg.Data.KB == "" {
				return fmt.Errorf("index push: data.kb is required (the passages to index)")
			}
			prog := newStageProgress(progressOutput(cmd), "index", map[string]string{"push": "doc"})
			opt.Progress = func(done, total int) { prog.update("push", done, total) }
			start := time.Now()
			res, err := retrieval.PushKB(cmd.Context(), cfg.Retrieval, cfg.Data.KB, opt)
			prog.finish()
			if err != nil {
				return fmt.Errorf("index push: %w", err)
			}
			w := cmd.OutOrStdout()
			if res.UpToDate {
				fmt.Fprintf(w, "index %s already holds the %d passages of %s with these settings: nothing pushed\n", res.Index, res.Docs, cfg.Data.KB)
				return nil
			}
			fmt.Fprintf(w, "pushed %d passages into %s (%d shard(s), %d replica(s)); every copy verified, %d rejected item(s) resent, in %s\n",
				res.Docs, res.Index, opt.Shards, opt.Replicas, res.Retried, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	cf.register(cmd, true)
	f := cmd.Flags()
	f.IntVar(&opt.Shards, "shards", opt.Shards, "primary shards of the new index (1: BM25 statistics over the whole KB)")
	f.IntVar(&opt.Replicas, "replicas", opt.Replicas, "replicas of each shard")
	f.IntVar(&opt.BatchDocs, "batch", opt.BatchDocs, "documents per _bulk request")
	f.BoolVar(&opt.Replace, "replace", false, "delete and push again an index an earlier push made (never one it did not)")
	return cmd
}
