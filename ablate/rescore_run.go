package ablate

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"time"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/retrieval/corpus"
)

// RescoreRun re-scores the logged rollouts of the run in runDir under each
// point of the grid file (Rescore), looking up references and chunk texts
// in the run's training data and knowledge base (data and kb override the
// saved paths), and writes the results as JSON to out (default:
// <runDir>/rescore.json) and as Markdown tables to stdout.
func RescoreRun(ctx context.Context, stdout io.Writer, runDir, gridPath, data, kb, out string) error {
	t0 := time.Now()
	cfg, err := configs.LoadRunSnapshot(runDir)
	if err != nil {
		return err
	}
	g, err := ReadGrid(gridPath)
	if err != nil {
		return err
	}
	settings, err := RescoreSettings(g, cfg)
	if err != nil {
		return err
	}
	recs, err := ReadRunLedgers(ctx, runDir)
	if err != nil {
		return err
	}
	if data == "" {
		data = cfg.Data.Train
	}
	if kb == "" {
		kb = cfg.Data.KB
	}
	turns, _, err := datasets.LoadContext(ctx, data, cfg.Data.LoadOptions())
	if err != nil {
		return fmt.Errorf("the run's training data (pass --data if it moved): %w", err)
	}
	if cfg.Data.Eval != "" {
		// Some runs draw prompts from both files; references may live in either.
		if more, _, err := datasets.LoadContext(ctx, cfg.Data.Eval, cfg.Data.LoadOptions()); err == nil {
			turns = append(turns, more...)
		}
	}
	k, err := corpus.Load(ctx, kb)
	if err != nil {
		return fmt.Errorf("the run's knowledge base (pass --kb if it moved): %w", err)
	}
	chunks, err := corpus.ChunkPassages(k.Passages, cfg.Retrieval.ChunkWords, cfg.Retrieval.ChunkStride)
	if err != nil {
		return err
	}
	own := SettingOf("own", nil, cfg)
	slog.Info("rescoring", "run", runDir, "rollouts", len(recs), "settings", len(settings))
	res, err := Rescore(ctx, recs, NewMapLookup(turns, chunks), own, settings)
	if err != nil {
		return err
	}
	if out == "" {
		out = filepath.Join(runDir, "rescore.json")
	}
	if err := atomicfile.WriteJSON(out, res); err != nil {
		return err
	}
	if err := WriteRescoreMarkdown(stdout, res); err != nil {
		return err
	}
	slog.Info("rescore written", "json", out, "elapsed_s", math.Round(time.Since(t0).Seconds()*100)/100)
	if res[0].MaxRewardDiff != 0 {
		slog.Warn("the run's own setting does not reproduce the logged rewards: the data, knowledge base or chunking differ from training",
			"max_reward_diff", res[0].MaxRewardDiff)
	}
	return nil
}
