package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/report"
)

func newReportCmd() *cobra.Command {
	var (
		out      string
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "report RUN_DIR... [--out DIR] [--watch]",
		Short: "Plots and an HTML report of one or more runs",
		Long: `report reads metrics.jsonl (and config.yaml, status.json and the newest
samples table) of each run directory and writes into --out: PNG plots
(reward, reward terms, KL, zero-variance groups, optimization, time per step,
held-out eval of the policy against the raw question with 95% intervals),
with several runs overlaid; report.html, self-contained with the images
embedded and the newest sample rewrites; and report.md linking the PNG files.
Without --out the report goes into the first run directory's report/ folder,
next to the run it describes.

--watch follows runs that are training: the report is rewritten whenever a
run writes (checked every --interval), and report.html reloads itself in the
browser at that interval while a run is in progress. It returns once every
run has stopped, after writing the final report.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				out = filepath.Join(args[0], "report")
			}
			if watch {
				html := filepath.Join(out, "report.html")
				slog.Info("watching", "runs", args, "html", html, "interval_s", interval.Seconds())
				if _, err := fmt.Fprintln(cmd.OutOrStdout(), html); err != nil {
					return err
				}
				return report.Watch(cmd.Context(), args, out, interval, func(res report.Result) {
					slog.Info("report written", "html", res.HTML, "steps", res.Steps, "in_progress", res.InProgress)
				})
			}
			res, err := report.Generate(cmd.Context(), args, out)
			if err != nil {
				return err
			}
			slog.Info("report written", "html", res.HTML, "markdown", res.Markdown, "figures", len(res.PNGs))
			_, err = fmt.Fprintln(cmd.OutOrStdout(), res.HTML)
			return err
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "output directory (default: RUN_DIR/report of the first run)")
	cmd.Flags().BoolVar(&watch, "watch", false, "rewrite the report as the runs train, until every run has stopped (report.html reloads itself meanwhile)")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "with --watch: how often to check the runs and reload the page")
	return cmd
}
