package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/searchtest"
	"github.com/himes-rl/himes/internal/sharedtest"
)

// faultCluster is the private three-node cluster of TestOpenSearchFaultsCLI,
// on ports the CI cluster (9250) does not use.
const faultClusterPort = 9260

// TestOpenSearchFaultsCLI runs himes against a real three-node OpenSearch
// cluster and hurts it while runs are under way:
//
//   - a node holding a copy of the index is SIGKILLed in the middle of
//     `himes eval` and of a short `himes train`: the replica takes over and
//     each run ends with exactly the metrics of an undisturbed run;
//   - a node is stalled (SIGSTOP: its sockets stay open, nothing answers):
//     calls hit retrieval.elasticsearch.timeout, are retried, and the eval
//     again ends with the undisturbed metrics;
//   - an index whose only shard copy is gone (red) is refused at start with
//     the cluster's state in the error.
//
// Eval counts failed turns and leaves them out of its means, so "the same
// metrics with no failed turn" is the claim that nothing was scored from a
// partial or failed answer. The undisturbed eval itself equals the same
// eval over the embedded index.
func TestOpenSearchFaultsCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): starts a three-node OpenSearch cluster and runs himes eval and train against it several times")
	}
	shared := sharedtest.SharedDir(t)
	c := searchtest.Start(t, faultClusterPort, 3)
	root := sharedtest.RepoRoot(t)
	out := t.TempDir()
	cluster := []string{"--config", filepath.Join(root, "configs", "quickstart.yaml"),
		"--set", "retrieval.method=elasticsearch",
		"--set", "retrieval.elasticsearch.url=[" + strings.Join(c.URLs(), ", ") + "]",
		"--set", "retrieval.elasticsearch.id_field=id",
		"--set", "run.output_dir=" + out}
	run := func(args ...string) string {
		t.Helper()
		o, err := runHimesProcess(t, nil, args...)
		if err != nil {
			t.Fatalf("himes %s: %v\n%s", strings.Join(args, " "), err, o)
		}
		return o
	}
	with := func(args []string, more ...string) []string { return append(append([]string{}, args...), more...) }

	// The shared KB for eval (Pyserini's analyzer), the demo KB for train.
	kbArgs := with(cluster, "--set", "retrieval.elasticsearch.index=kb", "--set", "data.kb="+filepath.Join(shared, "kb", "passages.jsonl"),
		"--set", "retrieval.analyzer=lucene-english", "--set", "retrieval.scoring=lucene")
	demoArgs := with(cluster, "--set", "retrieval.elasticsearch.index=demo")
	run(with([]string{"index", "push"}, kbArgs...)...)
	run(with([]string{"index", "push"}, demoArgs...)...)
	// Pushed again: nothing to do; with other settings: only with --replace.
	if o := run(with([]string{"index", "push"}, kbArgs...)...); !strings.Contains(o, "already holds the 4040 passages") {
		t.Errorf("a second identical push should do nothing:\n%s", tail(o, 5))
	}
	if o, err := runHimesProcess(t, nil, with([]string{"index", "push"}, with(kbArgs, "--set", "retrieval.k1=1.2")...)...); err == nil ||
		!strings.Contains(o, "pass --replace to delete and push it again") {
		t.Errorf("a push with another k1 over a pushed index: %v\n%s", err, tail(o, 5))
	}

	evalArgs := func(name string, extra ...string) []string {
		return with(with([]string{"eval"}, kbArgs...), append([]string{"--data", filepath.Join(shared, "conversations", "cast2020.jsonl"),
			"--rewriter", "raw,gold", "--resamples", "100", "--limit", "12", "--concurrency", "2", "--out", filepath.Join(out, name)}, extra...)...)
	}
	run(evalArgs("eval-clean")...)
	clean := readSummary(t, filepath.Join(out, "eval-clean"))
	// The same eval over the embedded index: the cluster ranks alike (see
	// retrieval's parity test), so every metric, interval and reward is equal.
	embedded := evalArgs("eval-embedded", "--set", "retrieval.method=bm25")
	run(embedded...)
	sameEval(t, clean, readSummary(t, filepath.Join(out, "eval-embedded")), "")

	t.Run("kill a node during eval", func(t *testing.T) {
		n := primaryNode(t, c, 1, "kb")
		o := runWhile(t, evalArgs("eval-kill", "--log-level", "debug"), func() {
			waitQueries(t, c, 1, "kb", 60)
			c.Signal(t, n, syscall.SIGKILL)
			t.Logf("killed node-%d (the primary of kb) after 60 queries", n)
		})
		sameEval(t, clean, readSummary(t, filepath.Join(out, "eval-kill")), o)
		t.Logf("the eval retried %d calls and %d times failed _msearch items", linesWith(o, "call failed, retrying"), linesWith(o, "items failed, sending them again"))
		c.StartNode(t, n)
		c.WaitFor(t, other(n), "green", 3, 3*time.Minute)
	})

	t.Run("stall a node during eval", func(t *testing.T) {
		n := primaryNode(t, c, 1, "kb")
		args := evalArgs("eval-stall", "--log-level", "debug",
			"--set", "retrieval.elasticsearch.timeout=4s", "--set", "retrieval.elasticsearch.retries=8",
			"--set", "retrieval.elasticsearch.backoff_base=500ms", "--set", "retrieval.elasticsearch.backoff_max=4s")
		o := runWhile(t, args, func() {
			waitQueries(t, c, other(n), "kb", 60)
			c.Signal(t, n, syscall.SIGSTOP)
			t.Logf("stalled node-%d (the primary of kb) after 60 queries", n)
		})
		c.Signal(t, n, syscall.SIGCONT)
		if linesWith(o, "call failed, retrying", "deadline exceeded") == 0 {
			t.Errorf("no call timed out and was retried while node-%d was stalled:\n%s", n, tail(o, 40))
		}
		sameEval(t, clean, readSummary(t, filepath.Join(out, "eval-stall")), o)
		t.Logf("the eval retried %d calls (%d after a timeout) and %d times failed _msearch items", linesWith(o, "call failed, retrying"),
			linesWith(o, "call failed, retrying", "deadline exceeded"), linesWith(o, "items failed, sending them again"))
		c.WaitFor(t, other(n), "green", 3, 3*time.Minute)
	})

	t.Run("kill a node during train", func(t *testing.T) {
		trainArgs := func(name string) []string {
			return with(with([]string{"train"}, demoArgs...), "--set", "run.name="+name, "--set", "grpo.steps=3",
				"--set", "grpo.prompts_per_step=4", "--set", "grpo.group_size=4", "--set", "grpo.eval_every=3")
		}
		run(trainArgs("train-clean")...)
		n := primaryNode(t, c, 1, "demo")
		o := runWhile(t, trainArgs("train-kill"), func() {
			waitFile(t, filepath.Join(out, "train-kill", "metrics.jsonl"))
			c.Signal(t, n, syscall.SIGKILL)
			t.Logf("killed node-%d (the primary of demo) after step 1", n)
		})
		a, b := trainMetrics(t, filepath.Join(out, "train-clean")), trainMetrics(t, filepath.Join(out, "train-kill"))
		if len(a) == 0 || !reflect.DeepEqual(a, b) {
			t.Errorf("train with a node killed after step 1 differs from the undisturbed run:\n clean %v\n kill  %v\n%s", a, b, tail(o, 30))
		}
		c.StartNode(t, n)
		c.WaitFor(t, other(n), "green", 3, 3*time.Minute)
	})

	t.Run("red index refused at start", func(t *testing.T) {
		// One shard, no replica, held by node-3 only: killing node-3 leaves a
		// two-node cluster (a quorum) whose index has lost its only copy.
		put(t, c.URL(1)+"/red", `{"settings": {"index": {"number_of_shards": 1, "number_of_replicas": 0, "routing.allocation.require._name": "node-3"}},
			"mappings": {"properties": {"contents": {"type": "text"}, "id": {"type": "keyword"}}}}`)
		put(t, c.URL(1)+"/red/_doc/1?refresh=true", `{"contents": "a passage", "id": "1"}`)
		c.WaitFor(t, 1, "green", 3, time.Minute)
		if o, err := runHimesProcess(t, nil, with([]string{"index", "push"}, with(kbArgs, "--set", "retrieval.elasticsearch.index=red")...)...); err == nil ||
			!strings.Contains(o, "exists and was not created by himes index push") {
			t.Errorf("a push over an index it did not create: %v\n%s", err, tail(o, 5))
		}
		c.Signal(t, 3, syscall.SIGKILL)
		c.WaitFor(t, 1, "red", 2, 3*time.Minute)
		o, err := runHimesProcess(t, nil, evalArgs("eval-red", "--set", "retrieval.elasticsearch.index=red", "--set", "data.kb=")...)
		if err == nil || !strings.Contains(o, "refusing to search: cluster himes-test is red for the index") {
			t.Fatalf("eval on a red index: %v, want a refusal naming the cluster state:\n%s", err, tail(o, 20))
		}
		t.Logf("refused: %s", tail(o, 1))
	})
}

// runWhile runs himes with args in a child process and calls hurt while it
// runs; the run must succeed.
func runWhile(t *testing.T, args []string, hurt func()) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "HIMES_TEST_MAIN=1", "CI=true")
	var o bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &o
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	hurt()
	if err := <-done; err != nil {
		t.Fatalf("himes %s: %v\n%s", strings.Join(args, " "), err, tail(o.String(), 40))
	}
	return o.String()
}

// other is a node that is not n.
func other(n int) int { return n%3 + 1 }

// primaryNode is the node number holding index's primary shard.
func primaryNode(t *testing.T, c *searchtest.Cluster, ask int, index string) int {
	t.Helper()
	var shards []struct {
		Prirep string `json:"prirep"`
		Node   string `json:"node"`
	}
	getJSON(t, c.URL(ask)+"/_cat/shards/"+index+"?format=json", &shards)
	for _, s := range shards {
		if s.Prirep == "p" {
			n, err := strconv.Atoi(strings.TrimPrefix(s.Node, "node-"))
			if err == nil {
				return n
			}
		}
	}
	t.Fatalf("no primary of %s in %+v", index, shards)
	return 0
}

// waitQueries waits until the index's shard copies have run at least n
// more queries than when called.
func waitQueries(t *testing.T, c *searchtest.Cluster, ask int, index string, n int) {
	t.Helper()
	count := func() int {
		var st struct {
			All struct {
				Total struct {
					Search struct {
						QueryTotal int `json:"query_total"`
					} `json:"search"`
				} `json:"total"`
			} `json:"_all"`
		}
		getJSON(t, c.URL(ask)+"/"+index+"/_stats/search", &st)
		return st.All.Total.Search.QueryTotal
	}
	start := count()
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if count()-start >= n {
			return
		}
	}
	t.Fatalf("the index %s did not see %d queries in 5 minutes", index, n)
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if st, err := os.Stat(path); err == nil && st.Size() > 0 {
			return
		}
	}
	t.Fatalf("%s did not appear in 5 minutes", path)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func put(t *testing.T, url, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT %s: %s", url, resp.Status)
	}
}

func readSummary(t *testing.T, dir string) evaluate.Report {
	t.Helper()
	var r evaluate.Report
	readEvalJSON(t, filepath.Join(dir, "summary.json"), &r)
	return r
}

// sameEval: no failed turn, and every metric's mean and interval equal to
// the undisturbed run's.
func sameEval(t *testing.T, clean, got evaluate.Report, out string) {
	t.Helper()
	if len(got.Systems) != len(clean.Systems) {
		t.Fatalf("%d systems, want %d", len(got.Systems), len(clean.Systems))
	}
	for i, s := range got.Systems {
		if s.Failed != 0 {
			t.Errorf("%s: %d of %d turns failed:\n%s", s.Name, s.Failed, s.Turns, tail(out, 30))
		}
		if !reflect.DeepEqual(s.Metrics, clean.Systems[i].Metrics) {
			t.Errorf("%s: metrics differ from the undisturbed run:\n got  %v\n want %v", s.Name, s.Metrics, clean.Systems[i].Metrics)
		}
	}
}

// trainMetrics is each metrics.jsonl line of a run without its timings.
func trainMetrics(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		for k := range m {
			if strings.HasSuffix(k, "_s") || strings.HasSuffix(k, "seconds") || k == "time" || k == "ts" || strings.Contains(k, "per_s") {
				delete(m, k)
			}
		}
		b, _ := json.Marshal(m)
		out = append(out, string(b))
	}
	return out
}

// linesWith counts the lines of s holding every one of subs.
func linesWith(s string, subs ...string) int {
	n := 0
	for line := range strings.Lines(s) {
		all := true
		for _, sub := range subs {
			all = all && strings.Contains(line, sub)
		}
		if all {
			n++
		}
	}
	return n
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return fmt.Sprintf("…\n%s", strings.Join(l, "\n"))
}
