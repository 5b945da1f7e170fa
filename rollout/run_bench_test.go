package rollout

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/himes-rl/himes/retrieval"
)

// threeChunks retrieves three fixed chunks for any rewrite.
type threeChunks struct{ chunks []retrieval.Ranked }

func (r threeChunks) Retrieve(context.Context, string, string, string) (retrieval.Result, error) {
	return retrieval.Result{Chunks: r.chunks}, nil
}

// instant answers immediately with the first words of the first chunk.
type instant struct{}

func (instant) Name() string { return "instant" }
func (instant) Respond(_ context.Context, _ string, chunks []retrieval.Ranked) (string, error) {
	return chunks[0].Text[:40], nil
}

// BenchmarkRunStep is the runner's own work for one GRPO step (16 groups of
// 8 distinct rewrites, three ~2 KB chunks each) with a free retriever,
// responder and scorer: de-duplication, scheduling, cache keys, records.
//
//	go test ./rollout -run '^$' -bench RunStep -benchtime 300x
func BenchmarkRunStep(b *testing.B) {
	var chunks []retrieval.Ranked
	for i := range 3 {
		chunks = append(chunks, retrieval.Ranked{Chunk: retrieval.Chunk{ID: fmt.Sprintf("CAR_%040d#%d", i, i),
			Text: strings.Repeat("words of a passage ", 100)}, Score: float64(10 - i)})
	}
	cfg := DefaultConfig()
	cfg.Concurrency, cfg.CacheSize = 64, 0
	r, err := NewRunner(cfg, threeChunks{chunks}, instant{}, &fakeScorer{})
	if err != nil {
		b.Fatal(err)
	}
	var groups []Group
	for p := range 16 {
		var rws []string
		for s := range 8 {
			rws = append(rws, fmt.Sprintf("what was the role of the national guard %d %d", p, s))
		}
		groups = append(groups, group(fmt.Sprint(p), "what was their role?", rws...))
	}
	b.ReportAllocs()
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	for b.Loop() {
		if _, st, err := r.Run(context.Background(), 1, groups); err != nil || st.Failed != 0 {
			b.Fatal(err, st)
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N)/1e3, "cpu_µs/op")
}
