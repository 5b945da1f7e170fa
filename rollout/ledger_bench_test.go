package rollout

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// benchRecords is one GRPO step's ledger as the grpo step benchmark writes
// it: 16 prompts × 8 samples, three chunks each, no memories; its chunk ids,
// rewrites and numbers vary with step as a run's do.
func benchRecords(step int) []Record {
	var recs []Record
	for p := range 16 {
		for s := range 8 {
			recs = append(recs, Record{Step: step, PromptID: fmt.Sprintf("cast20-%d_%d", 100+(p+16*step)%400, p%5), ConvID: fmt.Sprintf("cast20-%d", 100+(p+16*step)%400),
				Turn: p % 5, GroupIndex: p, SampleIndex: s, PolicyVersion: int64(step - 1),
				Question:    "What was the role of the National Guard in the protests that followed?",
				Rewrite:     fmt.Sprintf("What was the role of the National Guard protests Ferguson Missouri shooting %d %d", s, step),
				ChunkIDs:    []string{fmt.Sprintf("CAR_%040d#0", step*128+p*8+s), fmt.Sprintf("MARCO_%d#1", 1000+step*48+p*3+s%2), "CAR_2be8f82bc9f5be2c938e5167c8eb6aa4c629e2c2#0"},
				ChunkScores: []float64{17.25 + float64(s)/3 + float64(step)/11, 12.5 - float64(p)/7, 9.125}, Answer: "In response to the shooting of Trayvon Martin the movement began",
				RougeP: float64(s) / 9, RougeR: float64(p) / 17, RougeF1: float64(s*p) / 150, SquadF1: 0.31 + float64(s)/100, Hit: float64(s % 2),
				Alpha: 1, Beta: 0.5, Reward: float64(s*p) / 140, Advantage: float64(s)/4 - 1, Included: true,
				RetrieveSeconds: 2.1e-5 * float64(s+1+step), RespondSeconds: 0.2 + float64(p)*1e-4, ScoreSeconds: 3e-6 * float64(p+1)})
		}
	}
	return recs
}

func processCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkWriteLedger writes one step's ledger (128 rollouts) per op: as a
// file of its own, encoded, synced and renamed each step (how every step was
// written before ledger chunks), and appended to a chunk of N steps that is
// finished and written atomically every N ops (the cost per step amortized).
//
//	go test ./rollout -run '^$' -bench WriteLedger -benchtime 200x
func BenchmarkWriteLedger(b *testing.B) {
	steps := make([][]Record, 100)
	for i := range steps {
		steps[i] = benchRecords(i + 1)
	}
	b.Run("file-per-step", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "rollouts.parquet")
		b.ReportAllocs()
		cpu0 := processCPU()
		i := 0
		for b.Loop() {
			i++
			if err := WriteLedger(b.Context(), path, steps[i%len(steps)]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu_µs/op")
		if fi, err := os.Stat(path); err == nil {
			b.ReportMetric(float64(fi.Size()), "file_bytes/step")
		}
	})
	for _, n := range []int{10, 50} {
		b.Run(fmt.Sprintf("chunk-%d", n), func(b *testing.B) {
			dir := b.TempDir()
			c, err := NewLedgerChunk()
			if err != nil {
				b.Fatal(err)
			}
			var size int
			flush := func() {
				first, last, steps := c.Steps()
				data, err := c.Finish()
				if err != nil {
					b.Fatal(err)
				}
				if err := atomicfile.WriteFile(filepath.Join(dir, fmt.Sprintf("steps-%06d-%06d.parquet", first, last)), data, 0o644); err != nil {
					b.Fatal(err)
				}
				size = len(data) / steps
			}
			b.ReportAllocs()
			cpu0 := processCPU()
			step := 0
			for b.Loop() {
				step++
				if err := c.Append(step, steps[step%len(steps)]); err != nil {
					b.Fatal(err)
				}
				if _, _, k := c.Steps(); k == n {
					flush()
				}
			}
			if _, _, k := c.Steps(); k > 0 {
				flush()
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu_µs/op")
			b.ReportMetric(float64(size), "file_bytes/step")
		})
	}
}
