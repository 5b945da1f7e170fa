package retrieval

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/himes-rl/himes/embedding"
)

func TestDenseSearchMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	vecs := make([][]float32, 300)
	for i := range vecs {
		vecs[i] = make([]float32, 16)
		for j := range vecs[i] {
			vecs[i][j] = float32(r.NormFloat64())
		}
	}
	d, err := NewDenseIndex(vecs, "test")
	if err != nil {
		t.Fatal(err)
	}
	q := vecs[7]
	got, err := d.Search(q, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Doc != 7 || math.Abs(got[0].Score-1) > 1e-5 {
		t.Fatalf("a document's own vector is not its nearest: %+v", got[0])
	}
	// brute force with float64 cosines
	best := -2.0
	for i := range vecs {
		if i != 7 {
			best = max(best, embedding.Cosine(q, vecs[i]))
		}
	}
	if math.Abs(got[1].Score-best) > 1e-5 {
		t.Fatalf("second hit %v, brute-force best %v", got[1].Score, best)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Score > got[i-1].Score {
			t.Fatal("not sorted")
		}
	}
	if _, err := d.Search([]float32{1}, 1); err == nil {
		t.Fatal("wrong query dimension accepted")
	}
}

func TestRRFHandComputed(t *testing.T) {
	got := RRF(60, []Hit{{1, 9}, {2, 8}}, []Hit{{2, 0.9}, {3, 0.5}})
	want := []Hit{{2, 1.0/62 + 1.0/61}, {1, 1.0 / 61}, {3, 1.0 / 62}}
	for i := range want {
		if got[i].Doc != want[i].Doc || math.Abs(got[i].Score-want[i].Score) > 1e-15 {
			t.Fatalf("rank %d: got %+v, want %+v", i+1, got[i], want[i])
		}
	}
}
