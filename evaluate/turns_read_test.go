package evaluate

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"
)

// What WriteTurnsParquet writes, ReadTurnMetrics reads back: the chosen
// system's rows in order, NaN where a metric does not apply.
func TestReadTurnMetricsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "turns.parquet")
	policy := []TurnResult{
		{System: "policy", ConvID: "c1", Turn: 1, HasGold: true, Recall10: 0.5, NDCG3: 0.25},
		{System: "policy", ConvID: "c1", Turn: 2, HasGold: false, Recall10: 0.9},
		{System: "policy", ConvID: "c2", Turn: 1, HasGold: true, Recall10: 1, NDCG3: 0.75},
	}
	raw := []TurnResult{{System: "raw", ConvID: "c1", Turn: 1, HasGold: true, Recall10: 0.1}}
	memOn := []TurnResult{{System: "policy", Memory: true, ConvID: "c1", Turn: 1, HasGold: true, Recall10: 0.7}}
	if err := WriteTurnsParquet(path, [][]TurnResult{raw, policy, memOn}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTurnMetrics(context.Background(), path, "policy", false, []string{MRecall10, MNDCG3})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.ConvIDs, []string{"c1", "c1", "c2"}) || !slices.Equal(got.Turns, []int{1, 2, 1}) {
		t.Fatalf("keys %v %v", got.ConvIDs, got.Turns)
	}
	r := got.Values[MRecall10]
	if r[0] != 0.5 || !math.IsNaN(r[1]) || r[2] != 1 {
		t.Errorf("recall_10 %v, want [0.5 NaN 1] (the turn without judged passages is NaN, not its stale 0.9)", r)
	}
	if n := got.Values[MNDCG3]; n[0] != 0.25 || n[2] != 0.75 {
		t.Errorf("ndcg_cut_3 %v", n)
	}
	if _, err := ReadTurnMetrics(context.Background(), path, "gold", false, []string{MRecall10}); err == nil {
		t.Error("a system the file lacks: want an error")
	}
	if _, err := ReadTurnMetrics(context.Background(), path, "policy", false, []string{"no_such"}); err == nil {
		t.Error("a column the file lacks: want an error")
	}
}
