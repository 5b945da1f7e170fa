package ablate

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/stats"
)

// SeedKey is the config key a sweep varies to repeat a point over seeds.
const SeedKey = "run.seed"

// SeedStat is one metric over a group's seeds: mean, sample SD and the
// Student-t interval (nil where undefined: no value, or one seed).
type SeedStat struct {
	N    int      `json:"n"`
	Mean *float64 `json:"mean,omitempty"`
	SD   *float64 `json:"sd,omitempty"`
	Lo   *float64 `json:"ci_lo,omitempty"`
	Hi   *float64 `json:"ci_hi,omitempty"`
}

// SeedGroup is the grid points that differ only in run.seed.
type SeedGroup struct {
	Name   string   `json:"name"` // the point's name without the seed ("" when only seeds vary)
	Seeds  []string `json:"seeds"`
	Runs   []string `json:"runs"`
	Failed int      `json:"failed"` // runs left out: failed, or without the metric
	Level  float64  `json:"level"`
	// Metrics by name: policy_reward, reward_vs_raw, policy_recall_10,
	// policy_mrr, policy_ndcg_cut_3, train_reward_end.
	Metrics map[string]SeedStat `json:"metrics"`
}

// seedMetrics are the per-run values a group summarizes, in table order.
var seedMetrics = []struct {
	name, title string
	get         func(SweepRow) *float64
}{
	{"policy_reward", "policy reward", func(r SweepRow) *float64 { return r.PolicyReward }},
	{"reward_vs_raw", "Δ reward vs raw", func(r SweepRow) *float64 {
		if r.PolicyReward == nil || r.RawReward == nil {
			return nil
		}
		return ptr(*r.PolicyReward - *r.RawReward)
	}},
	{"policy_recall_10", "policy R@10", func(r SweepRow) *float64 { return r.PolicyR10 }},
	{"policy_mrr", "policy MRR", func(r SweepRow) *float64 { return r.PolicyMRR }},
	{"policy_ndcg_cut_3", "policy NDCG@3", func(r SweepRow) *float64 { return r.PolicyNDCG3 }},
	{"train_reward_end", "train reward end", func(r SweepRow) *float64 { return r.RewardEnd }},
}

// GroupSeeds groups the rows whose grid points differ only in run.seed and
// summarizes each metric over the group's successful runs at level (e.g.
// 0.95). It returns nil when the grid does not vary run.seed.
func GroupSeeds(rows []SweepRow, level float64) []SeedGroup {
	var groups []SeedGroup
	index := map[string]int{}
	values := map[int]map[string][]float64{}
	for _, r := range rows {
		var rest, names []string
		seed := ""
		for _, o := range r.Overrides {
			if k, v, _ := strings.Cut(o, "="); k == SeedKey {
				seed = v
				continue
			}
			rest = append(rest, o)
			names = append(names, o[strings.LastIndex(o[:strings.Index(o, "=")], ".")+1:])
		}
		if seed == "" {
			return nil // run.seed is not an axis of this grid
		}
		key := strings.Join(rest, "\x00")
		gi, ok := index[key]
		if !ok {
			gi = len(groups)
			index[key] = gi
			groups = append(groups, SeedGroup{Name: strings.Join(names, " "), Level: level, Metrics: map[string]SeedStat{}})
			values[gi] = map[string][]float64{}
		}
		g := &groups[gi]
		g.Seeds = append(g.Seeds, seed)
		g.Runs = append(g.Runs, r.RunName)
		if r.Error != "" || r.PolicyReward == nil {
			g.Failed++
			continue
		}
		for _, m := range seedMetrics {
			if v := m.get(r); v != nil && !math.IsNaN(*v) {
				values[gi][m.name] = append(values[gi][m.name], *v)
			}
		}
	}
	for gi := range groups {
		for _, m := range seedMetrics {
			s := stats.TInterval(values[gi][m.name], level)
			groups[gi].Metrics[m.name] = SeedStat{N: s.N, Mean: finitePtr(s.Mean), SD: finitePtr(s.SD), Lo: finitePtr(s.Lo), Hi: finitePtr(s.Hi)}
		}
	}
	return groups
}

func finitePtr(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// seedCell is "mean ± sd [lo, hi]", or what is defined of it.
func seedCell(s SeedStat) string {
	switch {
	case s.Mean == nil:
		return "–"
	case s.SD == nil:
		return fmt.Sprintf("%.3f (1 seed)", *s.Mean)
	}
	return fmt.Sprintf("%.3f ± %.3f [%.3f, %.3f]", *s.Mean, *s.SD, *s.Lo, *s.Hi)
}

// WriteSeedsMarkdown writes one row per seed group: each metric as mean ±
// sample SD with the Student-t interval over the group's seeds.
func WriteSeedsMarkdown(w io.Writer, groups []SeedGroup) error {
	if len(groups) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nOver seeds: mean ± sd [%.0f%% Student-t interval] of the final evaluation (train reward: mean of the last tenth of the steps):\n\n", 100*groups[0].Level)
	b.WriteString("| point | seeds | ok |")
	for _, m := range seedMetrics {
		b.WriteString(" " + m.title + " |")
	}
	b.WriteString("\n|---|---|---:|" + strings.Repeat("---:|", len(seedMetrics)) + "\n")
	for _, g := range groups {
		name := g.Name
		if name == "" {
			name = "(all)"
		}
		fmt.Fprintf(&b, "| %s | %s | %d |", evaluate.MarkdownEscape(name), strings.Join(g.Seeds, ", "), len(g.Seeds)-g.Failed)
		for _, m := range seedMetrics {
			b.WriteString(" " + seedCell(g.Metrics[m.name]) + " |")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
