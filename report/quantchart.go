package report

import "math"

// QuantAgreement is one quantized memory variant's agreement with float32
// (himes ablate memory-quant): the share of float32's final top-k it keeps,
// the Kendall τ-b of the candidates' final scores, and the share of
// float32's activated memories it activates.
type QuantAgreement struct {
	Variant                    string
	OverlapK, TauB, MemOverlap float64
}

// QuantAgreementChart plots each quantized variant's agreement with float32
// on one data set, as grouped bars without intervals (the agreements are
// means over turns, not estimates with a bootstrap).
func QuantAgreementChart(set string, rows []QuantAgreement) ([]byte, error) {
	var groups []string
	series := []BarSeries{{Name: "overlap@k"}, {Name: "Kendall τ-b"}, {Name: "memory overlap"}}
	for _, r := range rows {
		groups = append(groups, r.Variant)
		for i, v := range []float64{r.OverlapK, r.TauB, r.MemOverlap} {
			series[i].Mean = append(series[i].Mean, v)
			series[i].Lo = append(series[i].Lo, math.NaN())
			series[i].Hi = append(series[i].Hi, math.NaN())
		}
	}
	for i := range series {
		series[i].HideIntervals = true
	}
	return BarChart("Quantized memory embeddings vs float32: "+set, "agreement", groups, series)
}
