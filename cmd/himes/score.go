package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
)

// scoreInput is one JSONL line of `himes score`.
type scoreInput struct {
	Prediction *string `json:"prediction"`
	Reference  *string `json:"reference"`
	// References are several reference answers; the best match counts.
	References []string `json:"references"`
	Context    []string `json:"context"`
}

// refs are the line's references: reference, then references.
func (r scoreInput) refs() []string {
	var out []string
	if r.Reference != nil {
		out = append(out, *r.Reference)
	}
	return append(out, r.References...)
}

// scoreOutput is one output line: the input's line number, every term, and
// the normalization of the reward's EM.
type scoreOutput struct {
	Line int `json:"line"`
	hser.Score
	EMNormalization string `json:"em_normalization"`
}

func newScoreCmd() *cobra.Command {
	var (
		cf      configFlags
		skipBad bool
		limits  scoreLimits
		flagCfg = hser.DefaultConfig()
	)
	cmd := &cobra.Command{
		Use:   "score [FILE]",
		Short: "Score predictions with the HSER reward (JSONL in, JSONL out)",
		Long: `Reads JSONL lines {"prediction": ..., "reference": ..., "context": [chunk, ...]}
from FILE or stdin ("-" or no argument) and writes one JSON line per input:
line, rougeL_p, rougeL_r, rougeL_f1, em, squad_em, squad_f1, hit, alpha, beta,
reward, em_normalization, with reward = rougeL_f1 + alpha·em + beta·hit.
"context" (the retrieved chunks that hit looks in) is optional; blank lines are
skipped. "references": [...] instead of (or with) "reference" scores against
several reference answers: EM and the SQuAD metrics are the best over them
(as SQuAD v1.1 does), Rouge-L that of the reference with the best F1
(rouge-score's score_multi).

em is the reward's exact match, normalized as --tokenizer says
(em_normalization: "unicode" tokens without articles, or "squad" with
rouge-score); squad_em and squad_f1 are always the official SQuAD v1.1 script's
numbers ("2,000" and "2000" match there, not under unicode).

The reward settings come from the defaults, then the reward section of
--config if given, then the flags set explicitly. A malformed line stops the
run with an error naming its line; with --skip-bad it is skipped, and the
count is reported on stderr.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			run, err := cf.loadOrDefaults()
			if err != nil {
				return err
			}
			cfg := run.Reward
			fl := cmd.Flags()
			if fl.Changed("tokenizer") {
				cfg.Tokenizer = flagCfg.Tokenizer
			}
			if fl.Changed("stem") {
				cfg.Stem = flagCfg.Stem
			}
			if fl.Changed("alpha") {
				cfg.Alpha = flagCfg.Alpha
			}
			if fl.Changed("beta") {
				cfg.Beta = flagCfg.Beta
			}
			if fl.Changed("hit") {
				cfg.Hit = flagCfg.Hit
			}
			scorer, err := hser.NewScorer(cfg)
			if err != nil {
				return err
			}
			name, in := "stdin", cmd.InOrStdin()
			if len(args) == 1 && args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return fmt.Errorf("score: %w", err)
				}
				defer f.Close()
				name, in = args[0], f
			}
			return runScore(cmd, scorer, name, in, skipBad, limits)
		},
	}
	d := hser.DefaultConfig()
	f := cmd.Flags()
	f.StringVar(&flagCfg.Tokenizer, "tokenizer", d.Tokenizer, "Rouge-L tokenizer: unicode or rouge-score (bit-exact with Google's rouge-score)")
	f.BoolVar(&flagCfg.Stem, "stem", d.Stem, "Porter-stem tokens longer than 3 characters (NLTK's stemmer, as rouge-score's use_stemmer)")
	f.Float64Var(&flagCfg.Alpha, "alpha", d.Alpha, "weight α of EM in the reward")
	f.Float64Var(&flagCfg.Beta, "beta", d.Beta, "weight β of Hit in the reward")
	f.StringVar(&flagCfg.Hit, "hit", d.Hit, "hit: answer (the prediction occurs in the context) or gold (the reference does)")
	f.BoolVar(&skipBad, "skip-bad", false, "skip malformed lines (counted on stderr) instead of failing")
	f.IntVar(&limits.line, "max-line-bytes", datasets.DefaultMaxRecordBytes, "longest input line accepted, in bytes")
	f.IntVar(&limits.field, "max-field-bytes", datasets.DefaultMaxFieldBytes, "longest prediction, reference or context chunk accepted, in bytes")
	cf.register(cmd, false)
	return cmd
}

// scoreLimits bound one input line and each of its text fields, in bytes.
type scoreLimits struct{ line, field int }

// runScore streams in to the command's stdout.
func runScore(cmd *cobra.Command, scorer *hser.Scorer, name string, in io.Reader, skipBad bool, lim scoreLimits) error {
	if lim.line < 1 || lim.field < 1 {
		return fmt.Errorf("--max-line-bytes and --max-field-bytes must be ≥ 1, got %d and %d", lim.line, lim.field)
	}
	ctx := cmd.Context()
	r := bufio.NewReaderSize(in, 1<<16)
	w := bufio.NewWriter(cmd.OutOrStdout())
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	scored, skipped := 0, 0
	norm := scorer.Config().EMNormalization()
	for line := 1; ; line++ {
		if ctx != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		raw, n, tooLong, readErr := datasets.ReadBoundedLine(r, lim.line)
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return fmt.Errorf("%s:%d: read: %w", name, line, readErr)
		}
		if tooLong || len(bytes.TrimSpace(raw)) > 0 {
			rec, err := parseScoreLine(raw, lim.field)
			if tooLong {
				err = fmt.Errorf("line is %d bytes, more than the %d allowed (--max-line-bytes)", n, lim.line)
			}
			switch {
			case err != nil && skipBad:
				skipped++
				slog.Warn("skipping malformed line", "input", name, "line", line, "err", err)
			case err != nil:
				return fmt.Errorf("%s:%d: %w (use --skip-bad to skip malformed lines)", name, line, err)
			default:
				s := scorer.ScoreMulti(*rec.Prediction, rec.refs(), rec.Context)
				if err := enc.Encode(scoreOutput{Line: line, Score: s, EMNormalization: norm}); err != nil {
					return fmt.Errorf("write: %w", err)
				}
				scored++
			}
		}
		if readErr != nil { // io.EOF
			break
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if skipped > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "himes score: skipped %d malformed line(s)\n", skipped)
	}
	slog.Debug("scored", "input", name, "lines", scored, "skipped", skipped)
	return nil
}

// parseScoreLine decodes one line; the error names the field at fault.
func parseScoreLine(raw []byte, maxField int) (scoreInput, error) {
	var rec scoreInput
	// encoding/json would replace invalid UTF-8 by U+FFFD and score the result.
	if path, bad := datasets.InvalidUTF8Field(raw); bad {
		if path == "" {
			return rec, errors.New("invalid UTF-8")
		}
		return rec, fmt.Errorf("field %q: invalid UTF-8", path)
	}
	if fast, ok := decodeScoreLineFast(raw); ok {
		rec = fast
	} else if err := json.Unmarshal(raw, &rec); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return rec, fmt.Errorf("field %q: want %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return rec, fmt.Errorf("invalid JSON: %w", err)
	}
	if rec.Prediction == nil {
		return rec, fmt.Errorf("field \"prediction\": missing (want a string)")
	}
	if rec.Reference == nil && len(rec.References) == 0 {
		return rec, fmt.Errorf("field \"reference\": missing (want a string, or \"references\": a list of strings)")
	}
	type field struct{ name, v string }
	fields := []field{{"prediction", *rec.Prediction}}
	if rec.Reference != nil { // "references" alone is allowed
		fields = append(fields, field{"reference", *rec.Reference})
	}
	for i, r := range rec.References {
		fields = append(fields, field{fmt.Sprintf("references[%d]", i), r})
	}
	for i, c := range rec.Context {
		fields = append(fields, field{fmt.Sprintf("context[%d]", i), c})
	}
	for _, f := range fields {
		if len(f.v) > maxField {
			return rec, fmt.Errorf("field %q: %d bytes, more than the %d allowed (--max-field-bytes)", f.name, len(f.v), maxField)
		}
	}
	return rec, nil
}
