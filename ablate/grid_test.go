package ablate

import (
	"reflect"
	"strings"
	"testing"
)

func TestGridPointsCartesianFirstAxisOutermost(t *testing.T) {
	g, err := ParseGrid([]byte("# α then β\nalpha: [0, 0.5, 1]\nreward.beta: [0, 0.5]\nreward.hit: gold\n"), "grid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pts := g.Points()
	if len(pts) != 6 {
		t.Fatalf("%d points, want 3×2×1", len(pts))
	}
	want0 := []string{"reward.alpha=0", "reward.beta=0", "reward.hit=gold"}
	if !reflect.DeepEqual(pts[0].Overrides, want0) || pts[0].Name != "alpha=0 beta=0 hit=gold" {
		t.Fatalf("first point %+v", pts[0])
	}
	if pts[1].Overrides[1] != "reward.beta=0.5" || pts[2].Overrides[0] != "reward.alpha=0.5" {
		t.Fatalf("order: %v then %v", pts[1].Overrides, pts[2].Overrides)
	}
}

func TestGridErrorsNameLine(t *testing.T) {
	cases := map[string]string{
		"alpha: [0]\nalpha: [1]\n":      "grid.yaml:2",
		"alpha: []\n":                   "grid.yaml:1",
		"topk: [1]\n":                   "grid.yaml:1",
		"alpha:\n  x: 1\n":              "grid.yaml:2",
		"reward.alpha: [[0, 1]]\n":      "grid.yaml:1",
		"- alpha\n":                     "grid.yaml:1",
		"":                              "empty grid",
		"alpha:\n  - 0\n  - 1\n  - 0\n": "grid.yaml:4: key reward.alpha: value 0 already given on line 2",
	}
	for in, want := range cases {
		_, err := ParseGrid([]byte(in), "grid.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", in, err, want)
		}
	}
}

// Two axes whose keys end alike are named by enough of their keys to tell
// them apart; the others keep their last segment.
func TestGridPointNamesTellAxesApart(t *testing.T) {
	g, err := ParseGrid([]byte("reward.recall.weight: [0, 1]\nreward.ndcg.weight: 1\nalpha: 0\nb.c: 2\na.b.c: 3\n"), "grid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pts := g.Points()
	want := []string{"recall.weight=0 ndcg.weight=1 alpha=0 b.c=2 a.b.c=3", "recall.weight=1 ndcg.weight=1 alpha=0 b.c=2 a.b.c=3"}
	if len(pts) != 2 || pts[0].Name != want[0] || pts[1].Name != want[1] {
		t.Fatalf("names %q, %q; want %q", pts[0].Name, pts[1].Name, want)
	}
}
