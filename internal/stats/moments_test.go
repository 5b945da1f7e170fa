package stats

import (
	"math"
	"testing"
)

func TestMeanStdHandComputed(t *testing.T) {
	xs := []float64{2, 4, 4, 4, 5, 5, 7, 9} // mean 5, Σ(x−5)² = 32
	if m := Mean(xs); m != 5 {
		t.Errorf("Mean = %v, want 5", m)
	}
	if m, s := MeanStd(xs, false); m != 5 || s != 2 {
		t.Errorf("population MeanStd = %v, %v; want 5, 2", m, s)
	}
	if m, s := MeanStd(xs, true); m != 5 || math.Abs(s-math.Sqrt(32.0/7)) > 1e-15 {
		t.Errorf("sample MeanStd = %v, %v; want 5, %v", m, s, math.Sqrt(32.0/7))
	}
	for _, sample := range []bool{false, true} {
		if m, s := MeanStd(nil, sample); m != 0 || s != 0 {
			t.Errorf("MeanStd(nil, %v) = %v, %v; want 0, 0", sample, m, s)
		}
		if m, s := MeanStd([]float64{3}, sample); m != 3 || s != 0 {
			t.Errorf("MeanStd([3], %v) = %v, %v; want 3, 0", sample, m, s)
		}
	}
	if m := Mean(nil); m != 0 {
		t.Errorf("Mean(nil) = %v, want 0", m)
	}
	// A constant group has exactly zero spread (the advantages rely on it).
	if _, s := MeanStd([]float64{0.1, 0.1, 0.1}, false); s != 0 {
		t.Errorf("constant values: std %v, want exactly 0", s)
	}
}
