package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/retrieval"
)

// startRetrievalServe runs `himes retrieval serve` on a free loopback port
// until the test ends and returns its URL.
func startRetrievalServe(t *testing.T, cfg string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	serve := newRootCmd()
	serve.SetArgs([]string{"retrieval", "serve", "--config", cfg, "--addr", "127.0.0.1:0", "--log-level", "error"})
	serve.SetOut(pw)
	serve.SetErr(io.Discard)
	done := make(chan error, 1)
	go func() { done <- serve.ExecuteContext(ctx); pw.Close() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("retrieval serve exited with %v", err)
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no address line from retrieval serve: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "serving on ")
	if !ok {
		t.Fatalf("unexpected first line %q", line)
	}
	return url
}

// TestTrainAndEvalThroughRetrievalServe trains the quickstart for a few
// steps with retrieval.method remote against `himes retrieval serve` on
// loopback, and checks (1) every rollout retrieved what the in-process
// pipeline retrieves for its rewrite (same ids, same order, same scores),
// and (2) the run is the embedded run: same metrics and ledgers. Then
// `himes eval` through the service, with long-term memory off and on
// (re-ranking the service's texts), equals the embedded eval.
func TestTrainAndEvalThroughRetrievalServe(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): trains and evaluates the quickstart twice")
	}
	root := sharedtest.RepoRoot(t)
	cfgPath := filepath.Join(root, "configs", "quickstart.yaml")
	url := startRetrievalServe(t, cfgPath)
	out := t.TempDir()
	sets := []string{"--set", "run.output_dir=" + out, "--set", "grpo.steps=3", "--set", "grpo.eval_every=3",
		"--set", "grpo.prompts_per_step=6", "--set", "grpo.group_size=4", "--log-level", "warn"}
	remote := []string{"--set", "retrieval.method=remote", "--set", "retrieval.remote.url=" + url, "--set", "retrieval.remote.max_batch=7"}
	run := func(args ...string) {
		t.Helper()
		if o, err := runHimesProcess(t, nil, args...); err != nil {
			t.Fatalf("himes %s: %v\n%s", strings.Join(args, " "), err, o)
		}
	}
	run(append([]string{"train", "--config", cfgPath, "--set", "run.name=embedded"}, sets...)...)
	run(append(append([]string{"train", "--config", cfgPath, "--set", "run.name=remote"}, sets...), remote...)...)

	cfg, err := configs.Load(cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	local, err := retrieval.Open(t.Context(), cfg.Retrieval, cfg.Data.KB)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	remoteLedgers, embeddedLedgers := runLedgers(t, filepath.Join(out, "remote")), runLedgers(t, filepath.Join(out, "embedded"))
	for step := 1; step <= 3; step++ {
		got := remoteLedgers[step]
		if len(got) == 0 {
			t.Fatalf("no ledger records of step %d", step)
		}
		for _, rec := range got {
			if rec.Failed() {
				t.Fatalf("step %d: rollout failed through the service: %s (%s)", step, rec.Error, rec.ErrorKind)
			}
			want, err := local.Retrieve(t.Context(), rec.ConvID, rec.Rewrite, rec.Question)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			var scores []float64
			for _, c := range want.Chunks {
				ids, scores = append(ids, c.ID), append(scores, c.Score)
			}
			if !reflect.DeepEqual(rec.ChunkIDs, ids) || !reflect.DeepEqual(rec.ChunkScores, scores) {
				t.Fatalf("step %d rewrite %q: through the service %v %v, in-process %v %v",
					step, rec.Rewrite, rec.ChunkIDs, rec.ChunkScores, ids, scores)
			}
			checked++
		}
		if want := embeddedLedgers[step]; !reflect.DeepEqual(got, want) {
			t.Errorf("step %d: the remote run's ledger differs from the embedded run's", step)
		}
	}
	if checked != 3*6*4 {
		t.Errorf("checked %d rollouts, want %d", checked, 3*6*4)
	}
	gotM, wantM := readMetrics(t, filepath.Join(out, "remote", "metrics.jsonl")), readMetrics(t, filepath.Join(out, "embedded", "metrics.jsonl"))
	if len(gotM) == 0 || !reflect.DeepEqual(gotM, wantM) {
		t.Errorf("metrics differ: %s", firstDiff(gotM, wantM))
	}

	// himes eval through the service, memory off and on. On training
	// conversations, whose users' earlier questions the memory holds (causally).
	ev := []string{"eval", "--config", cfgPath, "--rewriter", "raw,concat", "--memory", "off,on", "--resamples", "50",
		"--data", filepath.Join(root, "datasets", "demo", "train.jsonl"), "--limit", "4", "--log-level", "warn"}
	run(append(ev, "--out", filepath.Join(out, "ev-embedded"))...)
	run(append(append(ev, "--out", filepath.Join(out, "ev-remote")), remote...)...)
	var a, b struct {
		Systems   []map[string]any       `json:"systems"`
		Retrieval evaluate.RetrievalInfo `json:"retrieval"`
	}
	readEvalJSON(t, filepath.Join(out, "ev-remote", "summary.json"), &a)
	readEvalJSON(t, filepath.Join(out, "ev-embedded", "summary.json"), &b)
	if len(a.Systems) != 4 || !reflect.DeepEqual(a.Systems, b.Systems) {
		t.Errorf("eval through the service differs from the embedded eval:\n got %v\nwant %v", a.Systems, b.Systems)
	}
	// Each folder names its retrieval, and the memory's embedder (the
	// config's hashing one) since systems ran with memory on.
	if a.Retrieval.Method != "remote" || b.Retrieval.Method != "bm25" || a.Retrieval.MemoryEmbedder == "" ||
		a.Retrieval.MemoryEmbedder != b.Retrieval.MemoryEmbedder || a.Retrieval.Embedder != "" {
		t.Errorf("retrieval recorded: remote %+v, embedded %+v", a.Retrieval, b.Retrieval)
	}
	for _, sys := range a.Systems {
		if sys["failed"].(float64) != 0 {
			t.Errorf("system %v: %v failed turns", sys["name"], sys["failed"])
		}
		if on := sys["memory"].(bool); on != (sys["memory_turns"].(float64) > 0) {
			t.Errorf("system %v: memory %v but memory activated on %v turns", sys["name"], on, sys["memory_turns"])
		}
		// The service carries the trace's re-rank flag: memory-on systems
		// re-rank some turns (equal to the embedded eval's, above), others none.
		if r := sys["reranked_turns"].(float64); r > sys["memory_turns"].(float64) || (r > 0) != sys["memory"].(bool) {
			t.Errorf("system %v: memory %v, re-ranked on %v of the %v turns with memories", sys["name"], sys["memory"], r, sys["memory_turns"])
		}
	}
	for _, f := range []string{"raw.trec", "concat+memory.trec"} {
		ra, errA := os.ReadFile(filepath.Join(out, "ev-remote", "runs", f))
		rb, errB := os.ReadFile(filepath.Join(out, "ev-embedded", "runs", f))
		if errA != nil || errB != nil || len(ra) == 0 || string(ra) != string(rb) {
			t.Errorf("TREC run %s differs (or is missing: %v, %v)", f, errA, errB)
		}
	}
}
