package rollout

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/retrieval"
)

// rankRetriever ranks the passages named by the rewrite's words, in order:
// "p5 p2" retrieves chunk p5#0 then p2#0 (the responder's top 1, the rest
// first-stage candidates).
type rankRetriever struct{}

func (rankRetriever) Retrieve(_ context.Context, _, rewrite, _ string) (retrieval.Result, error) {
	var res retrieval.Result
	words := strings.Fields(rewrite)
	for i, w := range words {
		sc := retrieval.Scored{ID: w + "#0", Score: float64(len(words) - i)}
		res.Trace.Candidates = append(res.Trace.Candidates, sc)
		if i == 0 {
			res.Chunks = append(res.Chunks, retrieval.Ranked{Chunk: retrieval.Chunk{ID: sc.ID, Text: "text " + w}, Score: sc.Score})
		}
	}
	return res, nil
}

func grade(g int) *int { return &g }

// Every rollout of a judged turn records the rank of its first relevant
// passage and the rank reward; reward.rank adds it to the reward; an
// unjudged turn is failed (kind unjudged) under reward.rank > 0, never
// scored 0.
func TestRunRecordsRank(t *testing.T) {
	judged := group("1", "q", "p5 p2", "p9 p7 p2", "p9", "x1 x2 x3 x4 x5 x6 x7 x8 x9 x10 p2")
	judged.Turn.Passages = []datasets.PassageRef{{ID: "p2", Relevance: grade(2)}, {ID: "p9", Relevance: grade(0)}}
	unjudged := group("2", "q2", "p5")
	for _, weight := range []float64{0, 0.5} {
		sc := &fakeScorer{rank: weight}
		r := newTestRunner(t, DefaultConfig(), rankRetriever{}, &fakeResponder{}, sc)
		recs, st, err := r.Run(t.Context(), 0, []Group{judged, unjudged})
		if err != nil {
			t.Fatal(err)
		}
		// p2 (grade 2) is relevant, p9 (grade 0) is not: ranks 2, 3, none, 11.
		for i, want := range []struct {
			rank, depth int
			reward      float64
		}{{2, 2, 17.0 / 9}, {3, 3, 16.0 / 9}, {0, 1, 0}, {11, 11, 89.0 / 90}} {
			rec := recs[i]
			if !rec.Judged || rec.FirstRelevantRank != want.rank || rec.RankDepth != want.depth ||
				math.Abs(rec.RankReward-want.reward) > 1e-12 || rec.Gamma != weight {
				t.Errorf("γ=%v rollout %d: judged %v rank %d depth %d rank reward %v γ %v; want rank %d depth %d reward %v",
					weight, i, rec.Judged, rec.FirstRelevantRank, rec.RankDepth, rec.RankReward, rec.Gamma, want.rank, want.depth, want.reward)
			}
			// fakeScorer's reward is len(answer) + hit, plus γ·RankReward.
			if base := float64(len(rec.Answer)) + rec.Hit; math.Abs(rec.Reward-(base+weight*want.reward)) > 1e-12 {
				t.Errorf("γ=%v rollout %d: reward %v, want %v", weight, i, rec.Reward, base+weight*want.reward)
			}
		}
		u := recs[4]
		switch weight {
		case 0:
			if u.Failed() || u.Judged || st.Failed != 0 {
				t.Errorf("γ=0: the unjudged turn's rollout %+v (failed %d)", u, st.Failed)
			}
		default:
			if u.ErrorKind != KindUnjudged || !strings.Contains(u.Error, "conv-2") || u.Reward != 0 || st.Failed != 1 {
				t.Errorf("γ>0: the unjudged turn's rollout %+v (failed %d)", u, st.Failed)
			}
		}
	}
}

func TestCheckRankReward(t *testing.T) {
	judged := datasets.Turn{ConvID: "a", Turn: 1, Passages: []datasets.PassageRef{{ID: "p1"}}}
	bare := datasets.Turn{ConvID: "b", Turn: 3}
	log := slog.New(slog.DiscardHandler)
	if err := CheckRankReward(0, []datasets.Turn{judged, bare}, 20, log); err != nil {
		t.Errorf("weight 0 must accept unjudged turns: %v", err)
	}
	if err := CheckRankReward(1, []datasets.Turn{judged}, 20, log); err != nil {
		t.Errorf("judged turns refused: %v", err)
	}
	err := CheckRankReward(1, []datasets.Turn{judged, bare}, 20, log)
	if err == nil || !strings.Contains(err.Error(), "1 of 2") || !strings.Contains(err.Error(), bare.ID()) {
		t.Errorf("unjudged turn: err %v, want it named", err)
	}
}

// Every retrieval term with a weight refuses unjudged turns, naming its key;
// the real scorer records Recall@10, NDCG@3 and RR of each rollout's ranking
// and fails an unjudged turn's rollout under reward.ndcg alone.
func TestCheckRetrievalReward(t *testing.T) {
	judged := datasets.Turn{ConvID: "a", Turn: 1, Passages: []datasets.PassageRef{{ID: "p1"}}}
	bare := datasets.Turn{ConvID: "b", Turn: 3}
	log := slog.New(slog.DiscardHandler)
	if err := CheckRetrievalReward(hser.DefaultConfig(), []datasets.Turn{judged, bare}, 20, log); err != nil {
		t.Errorf("default reward must accept unjudged turns: %v", err)
	}
	for _, c := range []struct {
		set  func(*hser.Config)
		name string
	}{
		{func(c *hser.Config) { c.Recall.Weight = 1 }, "reward.recall.weight"},
		{func(c *hser.Config) { c.NDCG.Weight = 1 }, "reward.ndcg.weight"},
		{func(c *hser.Config) { c.RR.Weight = 0.5 }, "reward.rr.weight"},
	} {
		cfg := hser.DefaultConfig()
		c.set(&cfg)
		if err := CheckRetrievalReward(cfg, []datasets.Turn{judged}, 20, log); err != nil {
			t.Errorf("%s: judged turns refused: %v", c.name, err)
		}
		err := CheckRetrievalReward(cfg, []datasets.Turn{judged, bare}, 20, log)
		if err == nil || !strings.Contains(err.Error(), c.name) || !strings.Contains(err.Error(), bare.ID()) {
			t.Errorf("%s: unjudged turn: err %v, want the key and the turn named", c.name, err)
		}
	}

	cfg := hser.DefaultConfig()
	cfg.NDCG.Weight = 1
	scorer, err := hser.NewScorer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	judgedG := group("1", "q", "p5 p2")
	judgedG.Turn.Passages = []datasets.PassageRef{{ID: "p2", Relevance: grade(1)}, {ID: "p3", Relevance: grade(1)}}
	r := newTestRunner(t, DefaultConfig(), rankRetriever{}, &fakeResponder{}, scorer)
	recs, st, err := r.Run(t.Context(), 0, []Group{judgedG, group("2", "q2", "p5")})
	if err != nil {
		t.Fatal(err)
	}
	// p2 at rank 2 of [p5 p2], two relevant: Recall@10 ½, RR ½,
	// NDCG@3 = (1/log2 3) / (1 + 1/log2 3).
	l3 := math.Log2(3)
	if rec := recs[0]; math.Abs(rec.RecallK-0.5) > 1e-12 || math.Abs(rec.RR-0.5) > 1e-12 || math.Abs(rec.NDCGK-(1/l3)/(1+1/l3)) > 1e-12 {
		t.Errorf("recorded recall_k %v ndcg_k %v rr %v", rec.RecallK, rec.NDCGK, rec.RR)
	}
	if u := recs[1]; u.ErrorKind != KindUnjudged || !strings.Contains(u.Error, "reward.ndcg") || st.Failed != 1 {
		t.Errorf("reward.ndcg > 0: the unjudged turn's rollout %+v (failed %d)", u, st.Failed)
	}
}
