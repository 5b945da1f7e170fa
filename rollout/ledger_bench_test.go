package rollout

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// benchRecords is one GRPO step's ledger as the grpo step benchmark writes
// it: 16 prompts × 8 samples, three chunks each, no memories.
func benchRecords() []Record {
	var recs []Record
	for p := range 16 {
		for s := range 8 {
			recs = append(recs, Record{Step: 7, PromptID: fmt.Sprintf("cast20-%d_%d", 100+p, p%5), ConvID: fmt.Sprintf("cast20-%d", 100+p),
				Turn: p % 5, GroupIndex: p, SampleIndex: s, PolicyVersion: 6,
				Question:    "What was the role of the National Guard in the protests that followed?",
				Rewrite:     fmt.Sprintf("What was the role of the National Guard protests Ferguson Missouri shooting %d", s),
				ChunkIDs:    []string{fmt.Sprintf("CAR_%040d#0", p*8+s), fmt.Sprintf("MARCO_%d#1", 1000+p*3+s%2), "CAR_2be8f82bc9f5be2c938e5167c8eb6aa4c629e2c2#0"},
				ChunkScores: []float64{17.25 + float64(s)/3, 12.5 - float64(p)/7, 9.125}, Answer: "In response to the shooting of Trayvon Martin the movement began",
				RougeP: float64(s) / 9, RougeR: float64(p) / 17, RougeF1: float64(s*p) / 150, SquadF1: 0.31 + float64(s)/100, Hit: float64(s % 2),
				Alpha: 1, Beta: 0.5, Reward: float64(s*p) / 140, Advantage: float64(s)/4 - 1, Included: true,
				RetrieveSeconds: 2.1e-5 * float64(s+1), RespondSeconds: 0.2 + float64(p)*1e-4, ScoreSeconds: 3e-6 * float64(p+1)})
		}
	}
	return recs
}

// BenchmarkWriteLedger writes one step's ledger (128 rollouts).
//
//	go test ./rollout -run '^$' -bench WriteLedger -benchtime 200x
func BenchmarkWriteLedger(b *testing.B) {
	recs := benchRecords()
	path := filepath.Join(b.TempDir(), "rollouts.parquet")
	b.ReportAllocs()
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	for b.Loop() {
		if err := WriteLedger(path, recs); err != nil {
			b.Fatal(err)
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N)/1e3, "cpu_µs/op")
	if fi, err := os.Stat(path); err == nil {
		b.ReportMetric(float64(fi.Size()), "file_bytes")
	}
}
