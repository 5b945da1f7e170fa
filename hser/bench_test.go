package hser

import (
	"bufio"
	"encoding/json"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// benchPairs draws (prediction, reference) pairs of 20–60 words from real
// MTRAG answers in the shared data.
func benchPairs(b *testing.B) [][2]string {
	f, err := os.Open(sharedtest.Shared(b, "conversations/mtrag_human_eval_subset.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var words [][]string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var row struct {
			Answer string `json:"answer"`
		}
		if json.Unmarshal(sc.Bytes(), &row) == nil && len(strings.Fields(row.Answer)) >= 60 {
			words = append(words, strings.Fields(row.Answer))
		}
	}
	if len(words) == 0 {
		b.Skip("no answer of 60 words or more in conversations/mtrag_human_eval_subset.jsonl: the benchmark draws its pairs from those")
	}
	r := rand.New(rand.NewPCG(5, 6))
	clip := clipper(r)
	pairs := make([][2]string, 256)
	for i := range pairs {
		a := words[r.IntN(len(words))]
		bb := a
		if i%2 == 1 {
			bb = words[r.IntN(len(words))]
		}
		pairs[i] = [2]string{clip(a), clip(bb)}
	}
	return pairs
}

// minCPUSample is the least thread CPU time a cpu-ns/op figure is computed
// from: the kernel accounts a thread's time in ticks of a few milliseconds,
// so a shorter run would report a quantized figure, or 0 ns and an infinite
// rate.
const minCPUSample = 100 * time.Millisecond

// reportThreadCPU reports cpu-ns/op and pairs/cpu-s for n pairs scored on
// this thread since cpu0, or says why it does not.
func reportThreadCPU(b *testing.B, cpu0 time.Duration, ok bool, n int) {
	cpu1, ok1 := threadCPU()
	switch {
	case !ok || !ok1 || n == 0:
		return
	case cpu1-cpu0 < minCPUSample:
		b.Logf("cpu-ns/op not reported: %v of thread CPU is below the %v the kernel's accounting needs; use a longer -benchtime", cpu1-cpu0, minCPUSample)
		return
	}
	per := float64(cpu1-cpu0) / float64(n)
	b.ReportMetric(per, "cpu-ns/op")
	b.ReportMetric(1e9/per, "pairs/cpu-s")
}

// clipper cuts a random run of 20–60 words (the texts have ≥ 60) from a text.
func clipper(r *rand.Rand) func([]string) string {
	return func(w []string) string {
		n := 20 + r.IntN(41)
		i := r.IntN(len(w) - n + 1)
		return strings.Join(w[i:i+n], " ")
	}
}

// BenchmarkScore scores one 20–60-word answer pair per op (no context).
// cpu-ns/op is the thread's CPU time per pair and pairs/cpu-s the rate per
// core, both independent of how busy the machine is (Linux).
func BenchmarkScore(b *testing.B) {
	pairs := benchPairs(b)
	benchScorers(b, func(s *Scorer, i int) {
		p := pairs[i%len(pairs)]
		s.Score(p[0], p[1], nil)
	})
}

// benchScorers runs score(s, i) for i = 0, 1, ... under each tokenizer and
// stemming mode, reporting thread CPU time per call and allocations.
func benchScorers(b *testing.B, score func(s *Scorer, i int)) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"unicode", DefaultConfig()},
		{"rouge-score", rougeCfg(false)},
		{"rouge-score+stem", rougeCfg(true)},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := mustScorer(b, c.cfg)
			b.ReportAllocs()
			runtime.LockOSThread() // so the thread's CPU time is the loop's
			defer runtime.UnlockOSThread()
			cpu0, ok := threadCPU()
			i := 0
			for b.Loop() {
				score(s, i)
				i++
			}
			reportThreadCPU(b, cpu0, ok, i)
		})
	}
}

// BenchmarkScoreGroup is BenchmarkScore as a GRPO step scores: 8 answers
// per reference, the answers' clips from BenchmarkScore's pairs and the
// reference the group's first pair's, so each reference is scanned and
// interned once per group (the scorer's prepared reference).
func BenchmarkScoreGroup(b *testing.B) {
	pairs := benchPairs(b)
	const g = 8
	benchScorers(b, func(s *Scorer, i int) {
		ref := pairs[(i/g*g)%len(pairs)][1]
		s.Score(pairs[i%len(pairs)][0], ref, nil)
	})
}

// BenchmarkLCS compares the bit-parallel LCS with the DP on the same ids.
func BenchmarkLCS(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	a, c := randomIDs(r, 40, 30), randomIDs(r, 50, 30)
	b.Run("bits", func(b *testing.B) {
		var peq, v []uint64
		for b.Loop() {
			_, peq, v = lcsBits(a, c, 30, peq, v)
		}
	})
	b.Run("dp", func(b *testing.B) {
		for b.Loop() {
			lcsDP(a, c)
		}
	})
}

// realPairs draws (prediction, reference) pairs of 20–60-word clips, the
// extractive answers rollouts score, from real CAsT 2020–2022 answers and
// KB passages in the shared data: both clips from one text for half the
// pairs. With nonASCII only pairs where a side holds a non-ASCII character
// are kept (curly quotes, dashes, no-break spaces, now and then an accented
// letter: a fifth of these texts have some).
//
// ctx gives each pair retrieved content: the texts its clips come from and
// three more (Hit; a GRPO step scores G answers against the same chunks, so
// they come from the scorer's chunk cache after the first round).
func realPairs(b testing.TB, nonASCII bool) (pairs [][2]string, ctx [][]string) {
	var words [][]string
	for _, rel := range []string{"conversations/cast2020.jsonl", "conversations/cast2021.jsonl",
		"conversations/cast2022.jsonl", "kb/passages.jsonl"} {
		f, err := os.Open(sharedtest.Shared(b, rel))
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var row struct {
				Answer string `json:"answer"`
				Text   string `json:"text"`
			}
			if json.Unmarshal(sc.Bytes(), &row) != nil {
				continue
			}
			if w := strings.Fields(row.Answer + row.Text); len(w) >= 60 {
				words = append(words, w)
			}
		}
		f.Close()
	}
	if len(words) == 0 {
		b.Skip("no answer or passage of 60 words or more in the shared CAsT files and KB: the benchmark draws its pairs from those")
	}
	r := rand.New(rand.NewPCG(7, 8))
	clip := clipper(r)
	pairs = make([][2]string, 0, 256)
	for len(pairs) < cap(pairs) {
		a := words[r.IntN(len(words))]
		bb := a
		if len(pairs)%2 == 1 {
			bb = words[r.IntN(len(words))]
		}
		p := [2]string{clip(a), clip(bb)}
		if nonASCII && isASCII(p[0]) && isASCII(p[1]) {
			continue
		}
		pairs = append(pairs, p)
		c := []string{strings.Join(a, " "), strings.Join(bb, " ")}
		for range 3 {
			c = append(c, strings.Join(words[r.IntN(len(words))], " "))
		}
		ctx = append(ctx, c)
	}
	return pairs, ctx
}

// BenchmarkScoreReal is BenchmarkScore on clips of CAsT answers and KB
// passages: "mixed" as drawn, "nonascii" only the pairs with a non-ASCII
// character (the general path's share of real text), "context" the mixed
// pairs with five retrieved chunks each (Hit).
func BenchmarkScoreReal(b *testing.B) {
	for _, set := range []struct {
		name          string
		nonASCII, ctx bool
	}{{"mixed", false, false}, {"nonascii", true, false}, {"context", false, true}} {
		pairs, ctxs := realPairs(b, set.nonASCII)
		if !set.ctx {
			ctxs = make([][]string, len(pairs))
		}
		for _, c := range []struct {
			name string
			cfg  Config
		}{
			{"unicode", DefaultConfig()},
			{"rouge-score", rougeCfg(false)},
		} {
			b.Run(set.name+"/"+c.name, func(b *testing.B) {
				s := mustScorer(b, c.cfg)
				b.ReportAllocs()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				cpu0, ok := threadCPU()
				i := 0
				for b.Loop() {
					p := pairs[i%len(pairs)]
					s.Score(p[0], p[1], ctxs[i%len(pairs)])
					i++
				}
				reportThreadCPU(b, cpu0, ok, i)
			})
		}
	}
}
