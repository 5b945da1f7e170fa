package grpo

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/himes-rl/himes/hser"
)

// BenchmarkComputeAdvantages computes one step's advantages, 64 prompts ×
// G = 16 with 5% failed rollouts, for each estimator and two aggregations.
// cpu-ns/op is the thread's CPU time per call, independent of how busy the
// machine is (Linux); it needs ≥ 100 ms of CPU:
//
//	go test -run '^$' -bench ComputeAdvantages -benchtime 2000x ./grpo/
func BenchmarkComputeAdvantages(b *testing.B) { benchAdvantages(b, ComputeAdvantages) }

func benchAdvantages(b *testing.B, compute func(AdvantageConfig, hser.Weights, [][]SampleReward) (Advantages, error)) {
	groups := advRandomGroups(rand.New(rand.NewPCG(5, 6)), 64, 16, 0.05)
	w := hser.Weights{Alpha: 0.5, Beta: 1}
	for _, est := range advEstimators {
		for _, agg := range []string{"sum", "normalize_then_sum"} {
			cfg := DefaultAdvantageConfig()
			cfg.Estimator, cfg.Aggregation = est, agg
			b.Run(est+"/"+agg, func(b *testing.B) {
				b.ReportAllocs()
				runtime.LockOSThread() // so the thread's CPU time is the loop's
				defer runtime.UnlockOSThread()
				cpu0, ok := threadCPU()
				n := 0
				for b.Loop() {
					if _, err := compute(cfg, w, groups); err != nil {
						b.Fatal(err)
					}
					n++
				}
				reportCPUPerOp(b, cpu0, ok, n)
			})
		}
	}
}

// minCPUSample is the least thread CPU time cpu-ns/op is computed from: the
// kernel accounts a thread's time in ticks of a few milliseconds.
const minCPUSample = 100 * time.Millisecond

// reportCPUPerOp reports cpu-ns/op for n ops run on this thread since cpu0,
// or says why it does not.
func reportCPUPerOp(b *testing.B, cpu0 time.Duration, ok bool, n int) {
	cpu1, ok1 := threadCPU()
	switch {
	case !ok || !ok1 || n == 0:
		return
	case cpu1-cpu0 < minCPUSample:
		b.Logf("cpu-ns/op not reported: %v of thread CPU is below %v; use a longer -benchtime", cpu1-cpu0, minCPUSample)
		return
	}
	b.ReportMetric(float64(cpu1-cpu0)/float64(n), "cpu-ns/op")
}
