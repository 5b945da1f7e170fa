package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/himes-rl/himes/internal/progress"
)

// globalFlags are the flags every subcommand accepts.
type globalFlags struct {
	logFormat string
	logLevel  string
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "himes",
		Short: "Train and evaluate the query rewriter of a HiMeS agent memory with GRPO",
		Long: `himes trains the short-term-memory query rewriter of a HiMeS-style agent
memory with SFT then GRPO (HSER reward: RougeL_F1 + α·EM + β·Hit), and evaluates
the whole pipeline: rewrite → retrieve → long-term-memory re-rank → respond.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// Log lines and progress bars share stderr through one Output,
			// which clears a bar before a log line and redraws it after.
			out := progress.NewOutput(cmd.ErrOrStderr(), cmd.ErrOrStderr() == os.Stderr && isInteractive(os.Stderr))
			logger, err := newLogger(out, g.logFormat, g.logLevel)
			if err != nil {
				return err
			}
			slog.SetDefault(logger)
			cmd.SetContext(progress.NewContext(cmd.Context(), out))
			return nil
		},
	}
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "auto", "log format: text or json (auto = text)")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.AddCommand(
		newTrainCmd(),
		newEvalCmd(),
		newAblateCmd(),
		newReportCmd(),
		newScoreCmd(),
		newPrepCmd(),
		newIndexCmd(),
		newSearchCmd(),
		newTRECEvalCmd(),
		newRetrievalCmd(),
		newMemoryCmd(),
		newEmbedCmd(),
		newTrainerCmd(),
		newExportCmd(),
		newConfigCmd(),
		newVersionCmd(),
	)
	return root
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "auto", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}

// isInteractive reports whether progress bars should be drawn: a terminal,
// and not CI (CI=true keeps output line-oriented).
func isInteractive(f *os.File) bool {
	if v := os.Getenv("CI"); v != "" && v != "false" && v != "0" {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

// progressOutput is the command's stderr as progress bars draw on it (see
// PersistentPreRunE); a command run without the root (a test) gets a
// line-oriented one.
func progressOutput(cmd *cobra.Command) *progress.Output {
	return outputFrom(cmd.Context(), cmd.ErrOrStderr())
}

// outputFrom is the command's shared Output carried by ctx, or else a
// line-oriented one on w (code that has a context but no command).
func outputFrom(ctx context.Context, w io.Writer) *progress.Output {
	if ctx != nil {
		if o := progress.FromContext(ctx); o != nil {
			return o
		}
	}
	return progress.NewOutput(w, false)
}
