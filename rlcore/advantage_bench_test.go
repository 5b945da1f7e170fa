package rlcore

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkComputeAdvantages computes one step's advantages, 64 prompts ×
// G = 16 with 5% failed rollouts, for each estimator and two aggregations:
//
//	go test -run '^$' -bench ComputeAdvantages -benchtime 2000x ./rlcore/
func BenchmarkComputeAdvantages(b *testing.B) {
	groups := advRandomGroups(rand.New(rand.NewPCG(5, 6)), 64, 16, 0.05)
	w := Weights{Alpha: 0.5, Beta: 1}
	reg := DefaultRegistry()
	for _, est := range advEstimators {
		for _, agg := range []string{"sum", "normalize_then_sum"} {
			cfg := DefaultAdvantageConfig()
			cfg.Estimator, cfg.Aggregation = est, agg
			b.Run(est+"/"+agg, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := reg.ComputeAdvantages(cfg, w, groups); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
