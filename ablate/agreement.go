package ablate

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/internal/trecmeasure"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
)

// Reward agreement (`himes ablate reward-agreement`, issue #26 item 4): does
// a reward rank the rewrites of one turn the way retrieval does? GRPO only
// sees a reward through its ranking within a group (advantages are group-
// normalized), so the question is asked within groups: per judged turn, a
// group of distinct rewrites, each retrieved, answered by the responder
// and scored; per reward, the rank correlation (Kendall τ-b, Spearman ρ)
// with the rewrite's Recall@10 and NDCG@3 over the group, averaged over the
// groups where both sides vary.

// Rewards compared, in table order.
const (
	RewardHSERGold   = "hser hit=gold"
	RewardHSERAnswer = "hser hit=answer"
	RewardRank       = "rank (ConvSearch-R1)"
	// The retrieval reward terms of the rewrite's own ranking, at the
	// config's reward.recall.k and reward.ndcg.k (hser.Config).
	RewardRecall = "recall@k (reward.recall)"
	RewardNDCG   = "ndcg@k (reward.ndcg)"
	RewardRR     = "rr (reward.rr)"
)

// Retrieval metrics compared with, in table order.
const (
	MetricRecall10 = "Recall@10"
	MetricNDCG3    = "NDCG@3"
)

var (
	agreementRewards = []string{RewardHSERGold, RewardHSERAnswer, RewardRank, RewardRecall, RewardNDCG, RewardRR}
	agreementMetrics = []string{MetricRecall10, MetricNDCG3}
)

// AgreementGroup is one turn's group: per reward and per metric, one value
// per rewrite (same order).
type AgreementGroup struct {
	Turn    string               `json:"turn"`
	Rewards map[string][]float64 `json:"rewards"`
	Metrics map[string][]float64 `json:"metrics"`
}

// AgreementRow is one (reward, metric) pair over a data set's groups.
type AgreementRow struct {
	Reward string `json:"reward"`
	Metric string `json:"metric"`
	// Tau and Rho are the mean within-group Kendall τ-b and Spearman ρ over
	// the Groups where both the reward and the metric vary (nil: none).
	Tau    *float64 `json:"kendall_tau_b"`
	Rho    *float64 `json:"spearman_rho"`
	Groups int      `json:"groups"`
	// MetricVaries counts the groups where the metric varies; Blind those
	// of them where the reward is constant: GRPO gets no signal from a
	// retrieval difference there.
	MetricVaries int `json:"metric_varies"`
	Blind        int `json:"reward_blind"`
}

// AgreementSet is one data set's measurement (agreement.json).
type AgreementSet struct {
	Name string `json:"name"`
	Data string `json:"data"`
	// Turns is the number of groups: judged turns with a reference answer.
	// Unjudged counts turns without judgments, NoAnswer judged turns
	// without a reference answer (HSER needs one); both are left out.
	Turns     int     `json:"turns"`
	Unjudged  int     `json:"unjudged_turns"`
	NoAnswer  int     `json:"no_answer_turns"`
	Rewrites  int     `json:"rewrites"`
	GroupSize float64 `json:"mean_group_size"`
	// Sources names where each group's rewrites came from.
	Sources string `json:"sources"`
	// ZeroVar is each reward's share of groups where it is constant (no
	// GRPO signal at all); Mean its mean over all rewrites.
	ZeroVar map[string]float64 `json:"zero_variance_share"`
	Mean    map[string]float64 `json:"mean"`
	Rows    []AgreementRow     `json:"rows"`
}

// Agree aggregates groups into one row per (reward, metric), in table order.
func Agree(groups []AgreementGroup) ([]AgreementRow, error) {
	var rows []AgreementRow
	for _, rw := range agreementRewards {
		if !slices.ContainsFunc(groups, func(g AgreementGroup) bool { _, ok := g.Rewards[rw]; return ok }) {
			continue // no group measured it (groups from before the reward existed)
		}
		for _, m := range agreementMetrics {
			row := AgreementRow{Reward: rw, Metric: m}
			var sumTau, sumRho float64
			for _, g := range groups {
				x, y := g.Rewards[rw], g.Metrics[m]
				if _, ok := g.Rewards[rw]; !ok {
					continue
				}
				if len(x) != len(y) {
					return nil, fmt.Errorf("turn %s: %d %s values vs %d %s values", g.Turn, len(x), rw, len(y), m)
				}
				if len(y) < 2 || constantValues(y) {
					continue
				}
				row.MetricVaries++
				if constantValues(x) {
					row.Blind++
					continue
				}
				tau, ok1, err := stats.KendallTauB(x, y)
				if err != nil {
					return nil, err
				}
				rho, ok2, err := stats.Spearman(x, y)
				if err != nil {
					return nil, err
				}
				if ok1 && ok2 {
					sumTau += tau
					sumRho += rho
					row.Groups++
				}
			}
			if row.Groups > 0 {
				t, r := sumTau/float64(row.Groups), sumRho/float64(row.Groups)
				row.Tau, row.Rho = &t, &r
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

func constantValues(xs []float64) bool {
	for _, v := range xs[1:] {
		if v != xs[0] {
			return false
		}
	}
	return true
}

// AgreementInput is what one data set's measurement needs.
type AgreementInput struct {
	Name, Data string
	Turns      []datasets.Turn
	Retrieve   retrieval.Retriever
	Responder  rollout.Responder
	// Reward is the base reward (tokenizer, stemming, α, β); the two HSER
	// variants set Hit to gold and to answer, and reward.rank is ignored:
	// every reward is measured on its own.
	Reward hser.Config
	// Sample returns extra rewrites per turn (a policy's samples; nil:
	// none); SampleLabel names them in Sources.
	Sample      func(ctx context.Context, turns []datasets.Turn) ([][]string, error)
	SampleLabel string
	// SamplesOnly leaves the raw question, concat and the human rewrite out
	// of the groups: only the samples, as in a GRPO group.
	SamplesOnly bool
}

// MeasureAgreement builds each judged turn's group — the raw question, the
// earlier user turns + question (concat), the human rewrite when there is
// one, then the samples, duplicates (rollout.NormalizeRewrite) dropped —
// retrieves, answers and scores every rewrite, and aggregates (Agree).
func MeasureAgreement(ctx context.Context, in AgreementInput) (AgreementSet, []AgreementGroup, error) {
	set := AgreementSet{Name: in.Name, Data: in.Data, ZeroVar: map[string]float64{}, Mean: map[string]float64{},
		Sources: "raw, concat, human rewrite"}
	if in.SamplesOnly {
		if in.Sample == nil {
			return set, nil, fmt.Errorf("%s: samples only, but no sampler", in.Data)
		}
		set.Sources = ""
	}
	var turns []datasets.Turn
	for _, t := range in.Turns {
		switch {
		case len(t.Qrels()) == 0:
			set.Unjudged++
		case len(t.References()) == 0:
			set.NoAnswer++
		default:
			turns = append(turns, t)
		}
	}
	if len(turns) == 0 {
		return set, nil, fmt.Errorf("%s: no judged turn with a reference answer", in.Data)
	}
	var samples [][]string
	if in.Sample != nil {
		var err error
		if samples, err = in.Sample(ctx, turns); err != nil {
			return set, nil, fmt.Errorf("%s: sample rewrites: %w", in.Data, err)
		}
		if len(samples) != len(turns) {
			return set, nil, fmt.Errorf("%s: sampler returned %d groups for %d turns", in.Data, len(samples), len(turns))
		}
		if set.Sources != "" {
			set.Sources += ", "
		}
		set.Sources += in.SampleLabel
	}
	gold, answer := in.Reward, in.Reward
	gold.Hit, answer.Hit = hser.HitGold, hser.HitAnswer
	gold.Rank, answer.Rank = 0, 0
	scGold, err := hser.NewScorer(gold)
	if err != nil {
		return set, nil, err
	}
	scAnswer, err := hser.NewScorer(answer)
	if err != nil {
		return set, nil, err
	}
	groups := make([]AgreementGroup, 0, len(turns))
	zero := map[string]int{}
	sum := map[string]float64{}
	for i, t := range turns {
		if err := ctx.Err(); err != nil {
			return set, nil, err
		}
		rws := groupRewrites(t, samples, i, !in.SamplesOnly)
		g := AgreementGroup{Turn: t.ID(), Rewards: map[string][]float64{}, Metrics: map[string][]float64{}}
		qrels, refs := t.Qrels(), t.References()
		for _, rw := range rws {
			res, err := in.Retrieve.Retrieve(ctx, t.User, rw, t.Question)
			if err != nil {
				return set, nil, fmt.Errorf("turn %s: retrieve %q: %w", t.ID(), rw, err)
			}
			run := retrieval.PassageRanking(res)
			ids := make([]string, len(run))
			for k, p := range run {
				ids[k] = p.ID
			}
			m := evaluate.ScoreRanking(run, qrels)
			ans, err := in.Responder.Respond(ctx, t.Question, res.Chunks)
			if err != nil {
				return set, nil, fmt.Errorf("turn %s: respond: %w", t.ID(), err)
			}
			texts := make([]string, len(res.Chunks))
			for k, c := range res.Chunks {
				texts[k] = c.Text
			}
			vals := map[string]float64{
				RewardHSERGold:   scGold.ScoreMulti(ans, refs, texts).Reward,
				RewardHSERAnswer: scAnswer.ScoreMulti(ans, refs, texts).Reward,
				RewardRank:       hser.RankReward(hser.FirstRelevantRank(ids, qrels)),
				RewardRecall:     trecmeasure.Recall(ids, qrels, in.Reward.RecallCutoff()),
				RewardNDCG:       trecmeasure.NDCGCut(ids, qrels, in.Reward.NDCGCutoff()),
				RewardRR:         trecmeasure.RecipRank(ids, qrels),
			}
			for _, name := range agreementRewards {
				g.Rewards[name] = append(g.Rewards[name], vals[name])
				sum[name] += vals[name]
			}
			g.Metrics[MetricRecall10] = append(g.Metrics[MetricRecall10], m.Recall10)
			g.Metrics[MetricNDCG3] = append(g.Metrics[MetricNDCG3], m.NDCG3)
		}
		for _, name := range agreementRewards {
			if len(rws) < 2 || constantValues(g.Rewards[name]) {
				zero[name]++
			}
		}
		set.Rewrites += len(rws)
		groups = append(groups, g)
	}
	set.Turns = len(groups)
	set.GroupSize = float64(set.Rewrites) / float64(set.Turns)
	for _, name := range agreementRewards {
		set.ZeroVar[name] = float64(zero[name]) / float64(set.Turns)
		set.Mean[name] = sum[name] / float64(set.Rewrites)
	}
	if set.Rows, err = Agree(groups); err != nil {
		return set, nil, err
	}
	slog.Info("reward agreement", "data", in.Data, "turns", set.Turns, "rewrites", set.Rewrites,
		"unjudged", set.Unjudged, "no_answer", set.NoAnswer)
	return set, groups, nil
}

// groupRewrites is turn i's group: raw, concat, the human rewrite (when
// fixed), then its samples, each distinct under rollout.NormalizeRewrite,
// empty ones dropped.
func groupRewrites(t datasets.Turn, samples [][]string, i int, fixed bool) []string {
	var cands []string
	if fixed {
		concat, _ := evaluate.Concat{}.Rewrite(context.Background(), t)
		cands = append(cands, t.Question, concat)
		if t.HasRewrite() {
			cands = append(cands, *t.Rewrite)
		}
	}
	if samples != nil {
		cands = append(cands, samples[i]...)
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range cands {
		k := rollout.NormalizeRewrite(c)
		if k == "" || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, strings.TrimSpace(c))
	}
	return out
}

// PolicySampler samples n rewrites per turn from pol (temperature temp,
// seeded), from the prompts render makes, batch prompts per call.
func PolicySampler(pol trainer.Policy, render evaluate.PromptFunc, n int, temp float64, maxTokens int, seed int64, batch int) func(context.Context, []datasets.Turn) ([][]string, error) {
	return func(ctx context.Context, turns []datasets.Turn) ([][]string, error) {
		out := make([][]string, len(turns))
		for lo := 0; lo < len(turns); lo += batch {
			hi := min(lo+batch, len(turns))
			prompts := make([]trainer.Prompt, 0, hi-lo)
			for _, t := range turns[lo:hi] {
				p, err := render(ctx, t)
				if err != nil {
					return nil, fmt.Errorf("turn %s: render prompt: %w", t.ID(), err)
				}
				if p.ID == "" {
					p.ID = t.ID()
				}
				prompts = append(prompts, p)
			}
			// The seed moves with the batch so batches do not repeat draws.
			resp, err := pol.Sample(ctx, trainer.SampleRequest{Prompts: prompts, N: n, Temperature: temp,
				MaxTokens: maxTokens, Seed: seed + int64(lo)})
			if err != nil {
				return nil, err
			}
			if len(resp.Samples) != len(prompts)*n {
				return nil, fmt.Errorf("policy returned %d samples, want %d", len(resp.Samples), len(prompts)*n)
			}
			for _, s := range resp.Samples {
				if s.PromptIndex < 0 || s.PromptIndex >= len(prompts) {
					return nil, fmt.Errorf("policy sample has prompt index %d of %d", s.PromptIndex, len(prompts))
				}
				out[lo+s.PromptIndex] = append(out[lo+s.PromptIndex], s.Text)
			}
		}
		return out, nil
	}
}

// WriteAgreement writes agreement.json and agreement.md to out and the
// Markdown to stdout.
func WriteAgreement(stdout io.Writer, out string, sets []AgreementSet) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("reward-agreement: %w", err)
	}
	if err := atomicfile.WriteJSON(filepath.Join(out, "agreement.json"), sets); err != nil {
		return err
	}
	md := AgreementMarkdown(sets)
	if err := atomicfile.Write(filepath.Join(out, "agreement.md"), 0o644, func(w io.Writer) error {
		_, err := io.WriteString(w, md)
		return err
	}); err != nil {
		return err
	}
	_, err := io.WriteString(stdout, md)
	return err
}

// AgreementMarkdown is the tables: per data set, one row per (reward,
// metric).
func AgreementMarkdown(sets []AgreementSet) string {
	var b strings.Builder
	b.WriteString("| data | reward | metric | mean τ-b | mean ρ | groups (both vary) | reward blind (metric varies) | reward zero-var groups | mean reward |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	f := func(p *float64) string {
		if p == nil {
			return "–"
		}
		return fmt.Sprintf("%.3f", *p)
	}
	for _, s := range sets {
		for _, r := range s.Rows {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %d/%d | %.3f | %.3f |\n", evaluate.MarkdownEscape(s.Name), r.Reward, r.Metric,
				f(r.Tau), f(r.Rho), r.Groups, r.Blind, r.MetricVaries, s.ZeroVar[r.Reward], s.Mean[r.Reward])
		}
	}
	b.WriteString("\n| data | groups (judged turns with an answer) | rewrites | mean group size | left out: unjudged / no answer | rewrites per group |\n|---|---:|---:|---:|---|---|\n")
	for _, s := range sets {
		fmt.Fprintf(&b, "| %s | %d | %d | %.2f | %d / %d | %s |\n", evaluate.MarkdownEscape(s.Name), s.Turns, s.Rewrites, s.GroupSize, s.Unjudged, s.NoAnswer, s.Sources)
	}
	return b.String()
}
