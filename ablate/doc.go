// Package ablate answers "would another reward or setting have changed the
// conclusion?": it re-scores logged rollouts under a grid of reward and
// advantage settings without calling any model (rescore), expands grids of
// config overrides (grid), and re-runs whole training runs per grid point,
// gathering their final evaluations (sweep).
package ablate
