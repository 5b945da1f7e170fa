package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// BenchmarkScoreCommand runs `himes score` over 2,000 JSONL lines of real
// MTRAG answers (20–60 words each, two context chunks) per op; cpu_µs/line
// is the process CPU per line.
//
//	go test -run '^$' -bench ScoreCommand -benchtime 5x ./cmd/himes/
func BenchmarkScoreCommand(b *testing.B) {
	f, err := os.Open(sharedtest.Shared(b, "conversations/mtrag_human_eval_subset.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var answers [][]string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var row struct {
			Answer string `json:"answer"`
		}
		if json.Unmarshal(sc.Bytes(), &row) == nil && len(strings.Fields(row.Answer)) >= 60 {
			answers = append(answers, strings.Fields(row.Answer))
		}
	}
	if len(answers) == 0 {
		b.Skip("no answer of 60 words or more in conversations/mtrag_human_eval_subset.jsonl: the benchmark scores those")
	}
	r := rand.New(rand.NewPCG(3, 4))
	clip := func() string {
		w := answers[r.IntN(len(answers))]
		n := 20 + r.IntN(41)
		i := r.IntN(len(w) - n + 1)
		return strings.Join(w[i:i+n], " ")
	}
	const lines = 2000
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for range lines {
		if err := enc.Encode(map[string]any{"prediction": clip(), "reference": clip(), "context": []string{clip(), clip()}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		root := newRootCmd()
		root.SetArgs([]string{"score"})
		root.SetIn(bytes.NewReader(in.Bytes()))
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		if err := root.Execute(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu0)/1e3/float64(b.N*lines), "cpu_µs/line")
}
