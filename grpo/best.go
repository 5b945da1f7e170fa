package grpo

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/internal/fielderr"
	"github.com/himes-rl/himes/internal/rundir"
)

// BestCheckpoint records the checkpoint with the best evaluation so far; it
// is kept outside the keep_checkpoints rotation.
type BestCheckpoint struct {
	Metric            string  `json:"metric"` // e.g. eval.policy.recall_10
	Mode              string  `json:"mode"`   // max or min
	Value             float64 `json:"value"`
	Step              int     `json:"step"`
	TrainerCheckpoint string  `json:"trainer_checkpoint"`
	// PolicyVersion of the checkpoint (absent in runs that predate it).
	PolicyVersion int64 `json:"policy_version,omitempty"`
}

// bestFields are the eval.policy.* fields best_metric may name; failed is
// minimized, the others maximized.
var bestFields = []string{"reward", "rougeL_f1", "em", "hit", "squad_em", "squad_f1", "recall_10", "mrr", "ndcg_cut_3", "failed"}

// bestMetric parses best_metric and best_mode into the field of
// EvalMetrics.Policy and the direction ("max" or "min").
func bestMetric(metric, mode string) (field, dir string, err error) {
	field, ok := strings.CutPrefix(metric, "eval.policy.")
	if !ok || !slices.Contains(bestFields, field) {
		return "", "", fielderr.New("best_metric", "want eval.policy.<%s> or \"\", got %q",
			strings.Join(bestFields, "|"), metric)
	}
	switch mode {
	case "max", "min":
		dir = mode
	case "auto":
		dir = "max"
		if field == "failed" {
			dir = "min"
		}
	default:
		return "", "", fielderr.New("best_mode", "must be auto, max or min, got %q", mode)
	}
	return field, dir, nil
}

// policyValue is the named eval.policy field of m; false when that
// evaluation did not compute it.
func policyValue(m EvalMetrics, field string) (float64, bool) {
	p := m.Policy
	opt := func(v *float64) (float64, bool) {
		if v == nil {
			return 0, false
		}
		return *v, true
	}
	switch field {
	case "reward":
		return p.Reward, true
	case "rougeL_f1":
		return p.RougeLF1, true
	case "em":
		return p.EM, true
	case "hit":
		return p.Hit, true
	case "squad_em":
		return p.SquadEM, true
	case "squad_f1":
		return p.SquadF1, true
	case "recall_10":
		return opt(p.Recall10)
	case "mrr":
		return opt(p.MRR)
	case "ndcg_cut_3":
		return opt(p.NDCG3)
	case "failed":
		return float64(p.Failed), true
	}
	panic(fmt.Sprintf("grpo: unknown best field %q", field)) // bestMetric validated it
}

// newBest returns the best record m would set, or nil when m does not beat
// the current one (ties keep the earlier checkpoint).
func (l *Loop) newBest(m *EvalMetrics) *BestCheckpoint {
	if m == nil || l.cfg.BestMetric == "" {
		return nil
	}
	field, dir, err := bestMetric(l.cfg.BestMetric, l.cfg.BestMode)
	if err != nil {
		return nil // Validate rejected it already
	}
	v, ok := policyValue(*m, field)
	if !ok {
		return nil // not computed at this evaluation: it can be no one's best
	}
	if b := l.state.Best; b != nil && b.Metric == l.cfg.BestMetric && b.Mode == dir {
		if (dir == "max" && v <= b.Value) || (dir == "min" && v >= b.Value) {
			return nil
		}
	}
	return &BestCheckpoint{Metric: l.cfg.BestMetric, Mode: dir, Value: v, Step: m.Step}
}

// retrievalBestFields are the best-metric fields computed from the ranking
// against the judged passages.
var retrievalBestFields = []string{"recall_10", "mrr", "ndcg_cut_3"}

// checkBestMetric refuses a retrieval best metric that every evaluation
// would report as 0 (no ranker, or no judged held-out turn): the "best"
// checkpoint would silently be the first one.
func checkBestMetric(cfg Config, deps Deps) error {
	field, _, err := bestMetric(cfg.BestMetric, cfg.BestMode)
	if cfg.BestMetric == "" || err != nil || !slices.Contains(retrievalBestFields, field) {
		return nil
	}
	turns := deps.Eval
	if cfg.EvalTurns > 0 && len(turns) > cfg.EvalTurns {
		turns = turns[:cfg.EvalTurns]
	}
	if len(turns) == 0 {
		return nil // no evaluations at all: no best checkpoint either
	}
	judged := slices.ContainsFunc(turns, func(t datasets.Turn) bool { return len(t.Passages) > 0 })
	if deps.Ranker == nil || !judged {
		return fmt.Errorf("grpo.best_metric %s: the held-out turns have no judged passages (or no ranker is wired), so it would be 0 at every evaluation", cfg.BestMetric)
	}
	return nil
}

// LoadCheckpointState reads the harness state of a run's checkpoint: which
// is "latest" (the newest step) or "best" (grpo.best_metric's).
func LoadCheckpointState(run *rundir.RunDir, which string) (State, error) {
	var st State
	switch which {
	case "latest":
		latest, step, err := rundir.LoadState(run, math.MaxInt, validState)
		if err != nil {
			return st, err
		}
		st = latest
		if step < 0 {
			return st, fmt.Errorf("run %s has no checkpoint", run.Path)
		}
	case "best":
		ok, err := run.LoadBestState(&st)
		if err != nil {
			return st, err
		}
		if !ok {
			return st, fmt.Errorf("run %s has no best checkpoint (grpo.best_metric was empty, or no evaluation ran)", run.Path)
		}
	default:
		return st, fmt.Errorf("checkpoint %q: want best or latest", which)
	}
	if st.TrainerCheckpoint == "" {
		return st, fmt.Errorf("run %s: the %s checkpoint names no trainer checkpoint", run.Path, which)
	}
	return st, nil
}
