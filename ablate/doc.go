// Package ablate answers "would another reward or setting have changed the
// conclusion?": it re-scores logged rollouts under a grid of reward and
// advantage settings without calling any model (rescore), expands grids of
// config overrides (grid), re-runs whole training runs per grid point,
// gathering their final evaluations (sweep), trains and evaluates leaving
// one collection out (transfer), and measures quantized long-term-memory
// embeddings against float32 (memquant). The experiments live here; the
// CLI only parses flags, wires the pipeline and calls them.
package ablate
