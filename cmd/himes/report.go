package main

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/report"
)

func newReportCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report RUN_DIR... [--out DIR]",
		Short: "Plots and an HTML report of one or more runs",
		Long: `report reads metrics.jsonl (and config.yaml) of each run directory and
writes into --out: PNG plots (reward, reward terms, KL, zero-variance groups,
optimization, held-out eval of the policy against the raw question), with
several runs overlaid; report.html, self-contained with the images embedded;
and report.md linking the PNG files. Without --out the report goes into the
first run directory's report/ folder, next to the run it describes.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				out = filepath.Join(args[0], "report")
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
	return cmd
}
