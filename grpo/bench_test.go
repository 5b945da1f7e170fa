package grpo

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
)

// slowResponder stands for a frozen model server: a fixed service time and
// a fixed number of slots; it spends no CPU while "generating". Its answer,
// the first eight words of the top chunk, is a substring found by a scan
// (no allocation), so the stub itself costs well under a microsecond per call.
type slowResponder struct {
	latency time.Duration
	slots   chan struct{}
}

func (s *slowResponder) Name() string { return "slow" }

func (s *slowResponder) Respond(ctx context.Context, _ string, chunks []retrieval.Ranked) (string, error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-s.slots }()
	if s.latency > 0 {
		time.Sleep(s.latency)
	}
	if len(chunks) == 0 {
		return "", nil
	}
	return firstWords(chunks[0].Text, 8), nil
}

// firstWords is the prefix of text up to its n-th space (all of it if it
// has fewer).
func firstWords(text string, n int) string {
	end := 0
	for range n {
		i := strings.IndexByte(text[end:], ' ')
		if i < 0 {
			return text
		}
		end += i + 1
	}
	return text[:end-1]
}

// wordPolicy is a near-free policy (the trainer is excluded from the
// harness's cost): sample k keeps every (k+2)-th content word of the history.
// The content words are computed once per prompt, and the CPU time of every
// Sample call is measured on its thread (stubCPU) so that the benchmark can
// leave it out of the harness's share.
type wordPolicy struct {
	version int64
	hist    map[string][]string // prompt id → content words of its history
	stubCPU time.Duration
}

func (p *wordPolicy) Info(context.Context) (trainer.Info, error) {
	return trainer.Info{PolicyVersion: p.version}, nil
}

func (p *wordPolicy) Sample(_ context.Context, req trainer.SampleRequest) (trainer.SampleResponse, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0, ok0 := threadCPU()
	defer func() {
		if t1, ok1 := threadCPU(); ok0 && ok1 {
			p.stubCPU += t1 - t0
		}
	}()
	if p.hist == nil {
		p.hist = map[string][]string{}
	}
	out := trainer.SampleResponse{PolicyVersion: p.version, Samples: make([]trainer.Sample, 0, len(req.Prompts)*req.N)}
	for i, pr := range req.Prompts {
		hist, ok := p.hist[pr.ID]
		if !ok || pr.ID == "" {
			hist = nil
			// Content words only, as a term-selection rewriter keeps
			// (stopwords would make every BM25 query scan the longest
			// posting lists).
			for _, m := range pr.Dialogue.History {
				for _, w := range strings.Fields(m.Content) {
					if len(w) > 4 && !benchStopwords[strings.ToLower(w)] {
						hist = append(hist, w)
					}
				}
			}
			p.hist[pr.ID] = hist
		}
		for k := 0; k < req.N; k++ {
			words := []string{pr.Dialogue.Question}
			for j := k; j < len(hist) && len(words) < 12; j += k + 2 + int(req.Seed%3) {
				words = append(words, hist[j])
			}
			out.Samples = append(out.Samples, trainer.Sample{PromptIndex: i, SampleIndex: k, Text: strings.Join(words, " "),
				TokenIDs: []int{k}, Logprobs: []float64{-0.7}, PolicyVersion: p.version})
		}
	}
	return out, nil
}

var benchStopwords = map[string]bool{"about": true, "there": true, "their": true, "which": true, "would": true,
	"these": true, "those": true, "where": true, "while": true, "other": true, "could": true, "should": true}

func (p *wordPolicy) SFTStep(context.Context, trainer.SFTRequest) (trainer.SFTResponse, error) {
	return trainer.SFTResponse{}, nil
}

func (p *wordPolicy) GRPOStep(context.Context, trainer.GRPORequest) (trainer.GRPOResponse, error) {
	p.version++
	return trainer.GRPOResponse{PolicyVersion: p.version}, nil
}

func (p *wordPolicy) Save(_ context.Context, r trainer.SaveRequest) (trainer.SaveResponse, error) {
	return trainer.SaveResponse{Name: r.Name, PolicyVersion: p.version}, nil
}

func (p *wordPolicy) Load(_ context.Context, r trainer.LoadRequest) (trainer.LoadResponse, error) {
	return trainer.LoadResponse{Name: r.Name, PolicyVersion: p.version}, nil
}

func (p *wordPolicy) Checkpoints(context.Context) ([]trainer.CheckpointInfo, error) { return nil, nil }

// benchLoop wires the real demo data, BM25 over the demo KB, the real
// reward and rollout runner, a slow responder and a free policy.
func benchLoop(b testing.TB, latency time.Duration, slots, prompts, group int, withBM25 bool) *Loop {
	b.Helper()
	demo := filepath.Join("..", "datasets", "demo")
	turns, _, err := datasets.LoadContext(b.Context(), filepath.Join(demo, "train.jsonl"), datasets.LoadOptions{UserField: "conv_id"})
	if err != nil {
		b.Fatal(err)
	}
	ret, err := retrieval.Open(context.Background(), retrieval.DefaultConfig(), filepath.Join(demo, "passages.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	scorer, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	rcfg := rollout.DefaultConfig()
	rcfg.Concurrency, rcfg.CacheSize = slots, 0 // every rollout waits for the responder
	var retr retrieval.Retriever = ret
	if !withBM25 {
		retr = echoRetriever{}
	}
	runner, err := rollout.NewRunner(rcfg, retr, &slowResponder{latency: latency, slots: make(chan struct{}, slots)}, scorer)
	if err != nil {
		b.Fatal(err)
	}
	rend, err := datasets.NewRenderer(datasets.DefaultPromptConfig())
	if err != nil {
		b.Fatal(err)
	}
	run, err := rundir.Open(b.TempDir(), "bench", rundir.New)
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.PromptsPerStep, cfg.GroupSize = prompts, group
	// A run's checkpoints close ledger files too: with the default
	// checkpoint_every a file holds that many steps, not ledger_steps.
	cfg.LedgerSteps = min(cfg.LedgerSteps, cfg.CheckpointEvery)
	tr, err := NewLoop(cfg, Deps{Policy: &wordPolicy{}, Runner: runner, Renderer: rend, Train: turns,
		Reward: hser.DefaultConfig(), Run: run, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	m, err := openMetrics(run.File("metrics.jsonl"), -1, false, tr.log)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	tr.metrics = m
	return tr
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStepOverhead measures the harness's own CPU per GRPO step (data,
// prompts, retrieval, reward, advantages, guards, ledger files, metrics) as a
// share of the step's wall time, with a responder of 200 ms per answer and
// 64 slots and 16 prompts × G = 8 per step; "no-retrieval" replaces BM25 by
// an echo to show the loop's own bookkeeping.
//
// The stubs are not the harness: the policy's CPU is measured on its
// thread in every Sample call and subtracted (stub_cpu_ms/step reports
// it); the responder's post-sleep work is an allocation-free scan, left in
// (so the share is, if anything, overstated). The process CPU (getrusage:
// every thread, user and system, GC included) is what is charged.
//
//	go test -run '^$' -bench StepOverhead -benchtime 20x ./grpo/
func BenchmarkStepOverhead(b *testing.B) {
	for _, v := range []struct {
		name string
		bm25 bool
	}{{"bm25", true}, {"no-retrieval", false}} {
		b.Run(v.name, func(b *testing.B) {
			tr := benchLoop(b, 200*time.Millisecond, 64, 16, 8, v.bm25)
			pol := tr.deps.Policy.(*wordPolicy)
			ctx := context.Background()
			b.ResetTimer()
			wall0, cpu0, stub0 := time.Now(), cpuTime(), pol.stubCPU
			for i := 1; i <= b.N; i++ {
				if _, err := tr.Step(ctx, i); err != nil {
					b.Fatal(err)
				}
			}
			// The steps still held count too: their file is written here.
			if err := tr.flushLedger(); err != nil {
				b.Fatal(err)
			}
			wall, stub := time.Since(wall0), pol.stubCPU-stub0
			cpu := cpuTime() - cpu0 - stub
			b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu_%_of_wall")
			b.ReportMetric(cpu.Seconds()*1000/float64(b.N), "cpu_ms/step")
			b.ReportMetric(stub.Seconds()*1000/float64(b.N), "stub_cpu_ms/step")
		})
	}
}

// BenchmarkLongRunMemory runs 10,000 fast steps (no responder latency) and
// reports resident memory after 1,000 and after 10,000 steps: a leak shows
// as growth between the two. Run: go test -bench LongRunMemory -benchtime 1x ./grpo/
func BenchmarkLongRunMemory(b *testing.B) {
	const steps = 10000
	tr := benchLoop(b, 0, 64, 4, 4, true)
	ctx := context.Background()
	var rss1k, heap1k float64
	for i := 1; i <= steps; i++ {
		if _, err := tr.Step(ctx, i); err != nil {
			b.Fatal(err)
		}
		if i == 1000 || i == steps {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			rss, heap := residentMiB(), float64(ms.HeapInuse)/(1<<20)
			if i == 1000 {
				rss1k, heap1k = rss, heap
			} else {
				b.ReportMetric(rss1k, "rss_MiB@1k")
				b.ReportMetric(rss, "rss_MiB@10k")
				b.ReportMetric(heap1k, "heap_MiB@1k")
				b.ReportMetric(heap, "heap_MiB@10k")
			}
		}
		if i%1000 == 0 {
			// Keep the temp dir small: ledgers are not what is measured here.
			os.RemoveAll(filepath.Join(tr.deps.Run.Path, "ledger"))
			os.MkdirAll(filepath.Join(tr.deps.Run.Path, "ledger"), 0o755)
		}
	}
}

// residentMiB reads VmRSS from /proc (Linux).
func residentMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
