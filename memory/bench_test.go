package memory

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
)

// Activation over 1M memories of one user, 64 dimensions (lsa_dim's
// default), float32 and every quantized variant. "partitioned": memories
// spread over the taxonomy's subtopics as HiMeS partitions them, so a query
// scores its partition (about 1/37 of them); "one-partition": all in one
// partition, so every query scores all 1M (the worst case). cpu-ns/op is
// the process's CPU time per query, which a busy machine inflates less than
// wall time. Run on one core:
//
//	GOMAXPROCS=1 go test ./memory/ -run '^$' -bench 'Activate1M/partitioned' -benchtime 400x
//	GOMAXPROCS=1 go test ./memory/ -run '^$' -bench 'Activate1M/one-partition' -benchtime 10x
const benchMemories, benchDim = 1_000_000, 64

var benchStores = map[string]*Store{}
var benchMu sync.Mutex

func benchStore(b *testing.B, layout string) *Store {
	benchMu.Lock()
	defer benchMu.Unlock()
	if m, ok := benchStores[layout]; ok {
		return m
	}
	cfg := DefaultConfig()
	cfg.TopN = 3
	var labels []Label
	if layout == "one-partition" {
		tax, err := DefaultTaxonomy()
		if err != nil {
			b.Fatal(err)
		}
		labels = tax.Labels()[:1]
	}
	m, _ := syntheticStore(b, cfg, benchDim, benchMemories, false, labels)
	benchStores[layout] = m
	return m
}

func BenchmarkActivate1M(b *testing.B) {
	ctx := context.Background()
	for _, layout := range []string{"partitioned", "one-partition"} {
		variants := []*Quantizer{nil}
		for _, bits := range QuantBits {
			for _, rot := range []bool{false, true} {
				q, err := NewQuantizer(bits, benchDim, rot, 1)
				if err != nil {
					b.Fatal(err)
				}
				variants = append(variants, q)
			}
		}
		for _, q := range variants {
			name, bytes := "float32", 4*benchDim
			if q != nil {
				name, bytes = q.Name(), q.BytesPerVector()
			}
			b.Run(layout+"/"+name, func(b *testing.B) {
				m := benchStore(b, layout)
				if q != nil {
					var err error
					if m, err = m.Quantized(q); err != nil {
						b.Fatal(err)
					}
				}
				rng := rand.New(rand.NewPCG(1, 1))
				queries := make([][]float32, 64)
				for i := range queries {
					queries[i] = randVec(rng, benchDim)
				}
				b.ResetTimer()
				cpu0 := processCPU()
				for i := range b.N {
					if _, _, err := m.Activate(ctx, "u", "a question", queries[i%len(queries)]); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(bytes), "B/memory") // after ResetTimer, which clears it
				// The kernel accounts CPU time in ticks of a few ms: below
				// 100 ms the figure would be quantized (or 0), so say so.
				if used := processCPU() - cpu0; cpu0 >= 0 && used >= 100e6 {
					b.ReportMetric(float64(used)/float64(b.N), "cpu-ns/op")
				} else if cpu0 >= 0 {
					b.Logf("cpu-ns/op not reported: %d ns of CPU is too short to measure; use a longer -benchtime", used)
				}
			})
		}
	}
}
