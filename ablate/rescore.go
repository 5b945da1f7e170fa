package ablate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/himes-rl/himes/internal/stats"

	"golang.org/x/sync/errgroup"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rlcore"
	"github.com/himes-rl/himes/rollout"
)

// Setting is one reward setting to rescore under.
type Setting struct {
	Name      string                 `json:"name"`
	Overrides []string               `json:"overrides"`
	Reward    hser.Config            `json:"reward"`
	Advantage rlcore.AdvantageConfig `json:"advantage"`
}

// Lookup supplies what the rollout ledger does not store: the reference
// answer of a turn and the text of a retrieved chunk.
type Lookup interface {
	References(convID string, turn int) ([]string, error)
	ChunkText(id string) (string, error)
}

// MapLookup is a Lookup over loaded turns and chunks.
type MapLookup struct {
	refs   map[string][]string
	chunks map[string]string
}

// NewMapLookup indexes turns by (conv_id, turn) and chunks by id.
func NewMapLookup(turns []datasets.Turn, chunks []retrieval.Chunk) *MapLookup {
	l := &MapLookup{refs: make(map[string][]string, len(turns)), chunks: make(map[string]string, len(chunks))}
	for _, t := range turns {
		l.refs[t.ID()] = t.References()
	}
	for _, c := range chunks {
		l.chunks[c.ID] = c.Text
	}
	return l
}

// References returns the turn's reference answers.
func (l *MapLookup) References(convID string, turn int) ([]string, error) {
	id := datasets.Turn{ConvID: convID, Turn: turn}.ID()
	refs, ok := l.refs[id]
	if !ok {
		return nil, fmt.Errorf("turn %s is not in the run's data", id)
	}
	return refs, nil
}

// ChunkText returns the chunk's text.
func (l *MapLookup) ChunkText(id string) (string, error) {
	t, ok := l.chunks[id]
	if !ok {
		return "", fmt.Errorf("chunk %s is not in the knowledge base (different kb or chunking?)", id)
	}
	return t, nil
}

// RescoreResult is what one setting does to the logged rollouts.
type RescoreResult struct {
	Setting
	// Own marks the run's own setting, the reference of the τ and flips.
	Own      bool `json:"own"`
	Rollouts int  `json:"rollouts"` // valid (non-failed) rollouts rescored
	Groups   int  `json:"groups"`

	Reward  float64 `json:"reward"`
	RougeF1 float64 `json:"rougeL_f1"`
	EM      float64 `json:"em"`
	Hit     float64 `json:"hit"`
	// RankReward is the mean ConvSearch-R1 rank reward (hser.RankReward)
	// over the Judged rollouts, those whose ledger row carries a rank
	// (rollout.Record.Judged); it enters Reward only with reward.rank > 0.
	RankReward float64 `json:"rank_reward"`
	Judged     int     `json:"judged"`

	// Correlations (Pearson, over rollouts) between the reward and its terms
	// and among the terms; null when a side is constant.
	Correlations map[string]*float64 `json:"correlations"`

	// ZeroVarShare is the share of groups whose rewards are all equal (or
	// that have fewer than two valid rollouts): no GRPO signal.
	ZeroVarShare float64 `json:"zero_var_share"`
	// IncludedShare is the share of valid rollouts the update would use.
	IncludedShare float64 `json:"included_share"`

	// KendallTau is the mean over groups of τ-b between this setting's
	// advantages and the own setting's, over the group's valid rollouts;
	// TauGroups counts the groups where both sides vary (τ is defined).
	KendallTau *float64 `json:"kendall_tau"`
	TauGroups  int      `json:"tau_groups"`
	// SignFlips is the share of valid rollouts whose advantage sign (−, 0, +)
	// differs from the own setting's: pushed the other way.
	SignFlips float64 `json:"sign_flips"`

	// MaxRewardDiff and MaxAdvantageDiff compare with what the run logged;
	// under the own setting both are 0 when rescoring reproduces the run.
	MaxRewardDiff    float64 `json:"max_reward_diff_vs_logged"`
	MaxAdvantageDiff float64 `json:"max_advantage_diff_vs_logged"`
}

// ledgerGroup is one logged group: the records of one prompt of one step.
type ledgerGroup struct {
	step int
	recs []rollout.Record
}

// groupLedger groups records by (step, group index), in step then group
// order, each group sorted by sample index. A repeated sample is an error:
// the rescoring would double-count it.
func groupLedger(recs []rollout.Record) ([][]ledgerGroup, error) {
	type key struct{ step, group int }
	byKey := map[key][]rollout.Record{}
	for _, r := range recs {
		k := key{r.Step, r.GroupIndex}
		byKey[k] = append(byKey[k], r)
	}
	keys := make([]key, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].step != keys[j].step {
			return keys[i].step < keys[j].step
		}
		return keys[i].group < keys[j].group
	})
	var steps [][]ledgerGroup
	for _, k := range keys {
		g := byKey[k]
		slices.SortFunc(g, func(a, b rollout.Record) int { return a.SampleIndex - b.SampleIndex })
		for i := 1; i < len(g); i++ {
			if g[i].SampleIndex == g[i-1].SampleIndex {
				return nil, fmt.Errorf("ledger: step %d group %d has sample %d twice", k.step, k.group, g[i].SampleIndex)
			}
		}
		if len(steps) == 0 || steps[len(steps)-1][0].step != k.step {
			steps = append(steps, nil)
		}
		steps[len(steps)-1] = append(steps[len(steps)-1], ledgerGroup{step: k.step, recs: g})
	}
	return steps, nil
}

// rescored holds one setting's per-rollout scores and advantages, in the
// layout of the grouped ledger.
type rescored struct {
	scores [][][]hser.Score // step → group → sample
	adv    grpoAdv
}

type grpoAdv struct {
	values  [][][]float64
	include [][][]bool
}

// Rescore re-scores the logged rollouts under each setting (no model is
// called: the answers are in the ledger) and recomputes advantages step by
// step as the training loop does; a rollout a guard penalized (Record.Guard)
// keeps its logged penalty as its reward. own is the run's setting; it is always
// evaluated and comes first in the result. Settings run concurrently.
func Rescore(ctx context.Context, recs []rollout.Record, lookup Lookup, own Setting, grid []Setting) ([]RescoreResult, error) {
	steps, err := groupLedger(recs)
	if err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		return nil, errors.New("rescore: the ledger has no rollouts")
	}
	// Resolve references and contexts once; every setting reuses them.
	refs := make([][][][]string, len(steps))
	ctxs := make([][][][]string, len(steps))
	for s, groups := range steps {
		refs[s] = make([][][]string, len(groups))
		ctxs[s] = make([][][]string, len(groups))
		for g, grp := range groups {
			refs[s][g] = make([][]string, len(grp.recs))
			ctxs[s][g] = make([][]string, len(grp.recs))
			for i, r := range grp.recs {
				if r.Failed() {
					continue
				}
				if refs[s][g][i], err = lookup.References(r.ConvID, r.Turn); err != nil {
					return nil, fmt.Errorf("step %d group %d sample %d: %w", r.Step, r.GroupIndex, r.SampleIndex, err)
				}
				texts := make([]string, len(r.ChunkIDs))
				for k, id := range r.ChunkIDs {
					if texts[k], err = lookup.ChunkText(id); err != nil {
						return nil, fmt.Errorf("step %d group %d sample %d: %w", r.Step, r.GroupIndex, r.SampleIndex, err)
					}
				}
				ctxs[s][g][i] = texts
			}
		}
	}

	all := append([]Setting{own}, grid...)
	out := make([]rescored, len(all))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(max(1, runtime.GOMAXPROCS(0)))
	for i, st := range all {
		eg.Go(func() error {
			r, err := rescoreOne(ectx, steps, refs, ctxs, st)
			if err != nil {
				return fmt.Errorf("setting %s: %w", st.Name, err)
			}
			out[i] = r
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	results := make([]RescoreResult, len(all))
	for i, st := range all {
		results[i] = summarizeRescore(st, steps, out[i], out[0])
		results[i].Own = i == 0
	}
	return results, nil
}

func rescoreOne(ctx context.Context, steps [][]ledgerGroup, refs [][][][]string, ctxs [][][][]string, st Setting) (rescored, error) {
	scorer, err := hser.NewScorer(st.Reward)
	if err != nil {
		return rescored{}, err
	}
	reg := rlcore.DefaultRegistry()
	if err := st.Advantage.ValidateWith(reg); err != nil {
		return rescored{}, fmt.Errorf("advantage config: %w", err)
	}
	if est, _ := reg.AdvantageEstimator(st.Advantage.Estimator); est.UsesGreedy {
		// Its baseline is each group's greedy rollout, which the ledger
		// does not hold: the advantages cannot be recomputed.
		return rescored{}, fmt.Errorf("setting %s: advantage.estimator %s compares each sample with its group's greedy rollout, which the ledger does not hold; rescore with another estimator (e.g. --set grpo.advantage.estimator=group)", st.Name, st.Advantage.Estimator)
	}
	r := rescored{
		scores: make([][][]hser.Score, len(steps)),
		adv:    grpoAdv{values: make([][][]float64, len(steps)), include: make([][][]bool, len(steps))},
	}
	for s, groups := range steps {
		if err := ctx.Err(); err != nil {
			return rescored{}, err
		}
		in := make([][]rlcore.SampleReward, len(groups))
		r.scores[s] = make([][]hser.Score, len(groups))
		for g, grp := range groups {
			in[g] = make([]rlcore.SampleReward, len(grp.recs))
			r.scores[s][g] = make([]hser.Score, len(grp.recs))
			for i, rec := range grp.recs {
				if rec.Failed() {
					continue
				}
				sc := scorer.ScoreMulti(rec.Answer, refs[s][g][i], ctxs[s][g][i])
				switch {
				case rec.Judged:
					// The rank depends on the rewrite's retrieval only, which the
					// ledger holds: any reward.rank weighs it in.
					sc = scorer.WithRank(sc, rec.FirstRelevantRank)
					// Recall@k, NDCG@k and RR as the run scored them (its k):
					// the ledger keeps the measures, not the whole ranking.
					sc.RecallK, sc.NDCGK, sc.RR = rec.RecallK, rec.NDCGK, rec.RR
					sc.Reward = st.Reward.RetrievalReward(sc.Reward, sc.RecallK, sc.NDCGK, sc.RR)
				case st.Reward.Retrieval():
					return rescored{}, fmt.Errorf("step %d group %d sample %d (turn %s/%d): %s weigh retrieval terms but the ledger has none for this rollout: "+
						"its turn has no relevance judgments, or the ledger predates the retrieval columns (judged, first_relevant_rank, recall_k, ndcg_k, rr); rerun the training with this himes",
						rec.Step, rec.GroupIndex, rec.SampleIndex, rec.ConvID, rec.Turn, strings.Join(st.Reward.RetrievalTerms(), ", "))
				}
				guarded := rec.Guard != ""
				if guarded {
					// The guard's decision depends on the rewrite and the turn,
					// not on the reward setting: its penalty replaces the
					// reward under every setting, as in training.
					sc.Reward = rec.GuardPenalty
				}
				r.scores[s][g][i] = sc
				in[g][i] = rlcore.SampleReward{Valid: true, Guarded: guarded, GuardPenalty: rec.GuardPenalty,
					Terms: grpo.RewardTerms(sc)}
			}
		}
		adv, err := reg.ComputeAdvantages(st.Advantage, grpo.RewardWeights(st.Reward), in)
		if err != nil {
			return rescored{}, fmt.Errorf("step %d: advantages: %w", groups[0].step, err)
		}
		r.adv.values[s], r.adv.include[s] = adv.Values, adv.Include
	}
	return r, nil
}

var termNames = []string{"reward", "rougeL_f1", "em", "hit", "rank_reward"}

func summarizeRescore(st Setting, steps [][]ledgerGroup, r, own rescored) RescoreResult {
	res := RescoreResult{Setting: st, Correlations: map[string]*float64{}}
	cols := make([][]float64, len(termNames))
	var tauSum float64
	var included, flips int
	var rankSum float64
	zeroVar := 0
	for s, groups := range steps {
		for g, grp := range groups {
			res.Groups++
			var mine, ref []float64
			var first float64
			valid, varies := 0, false
			for i, rec := range grp.recs {
				if rec.Failed() {
					continue
				}
				sc := r.scores[s][g][i]
				res.Rollouts++
				for k, v := range []float64{sc.Reward, sc.RougeF1, sc.EM, sc.Hit, sc.RankReward} {
					cols[k] = append(cols[k], v)
				}
				if sc.Judged {
					res.Judged++
					rankSum += sc.RankReward
				}
				if valid == 0 {
					first = sc.Reward
				} else if sc.Reward != first {
					varies = true
				}
				valid++
				a, b := r.adv.values[s][g][i], own.adv.values[s][g][i]
				mine, ref = append(mine, a), append(ref, b)
				if (a > 0) != (b > 0) || (a < 0) != (b < 0) { // the advantage changed sign
					flips++
				}
				if r.adv.include[s][g][i] {
					included++
				}
				res.MaxRewardDiff = math.Max(res.MaxRewardDiff, math.Abs(sc.Reward-rec.Reward))
				res.MaxAdvantageDiff = math.Max(res.MaxAdvantageDiff, math.Abs(a-rec.Advantage))
			}
			if !varies {
				zeroVar++
			}
			if tau, ok, _ := stats.KendallTauB(mine, ref); ok {
				tauSum += tau
				res.TauGroups++
			}
		}
	}
	if res.Groups > 0 {
		res.ZeroVarShare = float64(zeroVar) / float64(res.Groups)
	}
	if res.Rollouts > 0 {
		n := float64(res.Rollouts)
		res.Reward, res.RougeF1, res.EM, res.Hit = stats.Mean(cols[0]), stats.Mean(cols[1]), stats.Mean(cols[2]), stats.Mean(cols[3])
		res.IncludedShare = float64(included) / n
		if res.Judged > 0 {
			res.RankReward = rankSum / float64(res.Judged)
		}
		res.SignFlips = float64(flips) / n
	}
	if res.TauGroups > 0 {
		t := tauSum / float64(res.TauGroups)
		res.KendallTau = &t
	}
	for i := range termNames {
		for j := i + 1; j < len(termNames); j++ {
			if c, ok, _ := stats.Pearson(cols[i], cols[j]); ok {
				res.Correlations[termNames[i]+"~"+termNames[j]] = &c
			} else {
				res.Correlations[termNames[i]+"~"+termNames[j]] = nil
			}
		}
	}
	return res
}

// LedgerDir is where a run keeps its rollout ledgers.
const LedgerDir = "ledger"

// ReadRunLedgers reads every ledger file of runDir (runDir/ledger: the
// steps-F-L.parquet chunks and an older himes's step-N.parquet files) in
// step order.
func ReadRunLedgers(ctx context.Context, runDir string) ([]rollout.Record, error) {
	files, err := rundir.LedgerFiles(runDir)
	if err != nil {
		return nil, fmt.Errorf("ledgers of %s: %w", runDir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no rollout ledgers in %s", filepath.Join(runDir, LedgerDir))
	}
	var all []rollout.Record
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		recs, err := rollout.ReadLedger(ctx, f.Path)
		if err != nil {
			return nil, fmt.Errorf("ledger %s: %w", f.Path, err)
		}
		all = append(all, recs...)
	}
	return all, nil
}

// SettingOf is the reward setting of a config.
func SettingOf(name string, overrides []string, cfg configs.Config) Setting {
	return Setting{Name: name, Overrides: overrides, Reward: cfg.Reward, Advantage: cfg.GRPO.Advantage}
}

// RescoreSettings expands a grid over the run's config into settings. Only
// reward.* and grpo.advantage.* keys can be rescored; anything else changes
// what was sampled or retrieved and needs a new run (ablate sweep).
func RescoreSettings(g Grid, base configs.Config) ([]Setting, error) {
	for _, ax := range g.Axes {
		if !strings.HasPrefix(ax.Key, "reward.") && !strings.HasPrefix(ax.Key, "grpo.advantage.") {
			return nil, fmt.Errorf("%s:%d: key %s cannot be rescored from logged rollouts (only reward.* and grpo.advantage.*); use `himes ablate sweep`", g.Source, ax.Line, ax.Key)
		}
	}
	var out []Setting
	// Sequential on purpose: Config.Override touches the config's line map.
	for _, p := range g.Points() {
		cfg, err := g.Apply(base, p)
		if err != nil {
			return nil, err
		}
		if err := cfg.Reward.Validate(); err != nil {
			return nil, fmt.Errorf("%s: point %s: reward: %w", g.Source, p.Name, err)
		}
		if err := cfg.GRPO.Advantage.Validate(); err != nil {
			return nil, fmt.Errorf("%s: point %s: grpo.advantage: %w", g.Source, p.Name, err)
		}
		out = append(out, SettingOf(p.Name, p.Overrides, cfg))
	}
	return out, nil
}
