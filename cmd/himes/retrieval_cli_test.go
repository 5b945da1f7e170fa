package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/himes-rl/himes/evaluate/ir"
	"github.com/himes-rl/himes/internal/sharedtest"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/retrieval"
)

// runCLI runs a himes command in-process and returns stdout and the error.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.Execute()
	return out.String(), err
}

type searchJSON struct {
	Chunks []retrieval.Ranked `json:"chunks"`
	Trace  retrieval.Trace    `json:"trace"`
}

func TestIndexBuildThenSearchMatchesInMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): builds and searches indexes through the CLI, several times")
	}
	kb := filepath.Join(sharedtest.RepoRoot(t), "datasets", "demo", "passages.jsonl")
	dir := filepath.Join(t.TempDir(), "ix")
	if _, err := runCLI(t, "index", "build", "--kb", kb, "--out", dir); err != nil {
		t.Fatal(err)
	}
	search := func(extra ...string) searchJSON {
		out, err := runCLI(t, append([]string{"search", "--kb", kb, "--json", "garage door opener problems"}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		var r searchJSON
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("search --json: %v\n%s", err, out)
		}
		return r
	}
	persisted, inMemory := search("--index", dir), search()
	if len(persisted.Chunks) == 0 {
		t.Fatal("no results")
	}
	for i := range inMemory.Chunks {
		if persisted.Chunks[i].ID != inMemory.Chunks[i].ID || persisted.Chunks[i].Score != inMemory.Chunks[i].Score {
			t.Fatalf("rank %d: persisted %v, in memory %v", i, persisted.Chunks[i], inMemory.Chunks[i])
		}
	}
	if !strings.Contains(strings.ToLower(persisted.Chunks[0].Text), "garage door") {
		t.Errorf("top chunk does not mention the query: %.80q", persisted.Chunks[0].Text)
	}

	// The on-disk index ranks the same and serves the same texts.
	disk := filepath.Join(t.TempDir(), "disk")
	if _, err := runCLI(t, "index", "build", "--kb", kb, "--out", disk, "--disk", "--block-docs", "500"); err != nil {
		t.Fatal(err)
	}
	onDisk := search("--index", disk)
	if len(onDisk.Chunks) != len(inMemory.Chunks) {
		t.Fatalf("on disk %d results, in memory %d", len(onDisk.Chunks), len(inMemory.Chunks))
	}
	for i := range inMemory.Chunks {
		if onDisk.Chunks[i] != inMemory.Chunks[i] {
			t.Fatalf("rank %d: on disk %+v, in memory %+v", i, onDisk.Chunks[i], inMemory.Chunks[i])
		}
	}
	if out, err := runCLI(t, "index", "info", disk); err != nil || !strings.Contains(out, "checksum ok") {
		t.Fatalf("index info on disk: %v\n%s", err, out)
	}

	// An index built with other BM25 parameters is refused, not silently used.
	other := filepath.Join(t.TempDir(), "ix2")
	if _, err := runCLI(t, "index", "build", "--kb", kb, "--out", other, "--k1", "1.2"); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "search", "--kb", kb, "--index", other, "garage door"); err == nil || !strings.Contains(err.Error(), "k1=1.2") {
		t.Fatalf("stale index: got %v", err)
	}
}

// TestTRECRunRewriteBeatsQuestion writes TREC runs for the demo eval turns
// with the human rewrite and with the raw question, and scores them with the
// trec_eval-exact Recall@10 against the turns' judged passages.
func TestTRECRunRewriteBeatsQuestion(t *testing.T) {
	demo := filepath.Join(sharedtest.RepoRoot(t), "datasets", "demo")
	kb, queries := filepath.Join(demo, "passages.jsonl"), filepath.Join(demo, "eval.jsonl")
	turns, _, err := datasets.LoadContext(t.Context(), queries, datasets.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	qrels := map[string]map[string]int{}
	for _, tu := range turns {
		q := map[string]int{}
		for _, p := range tu.Passages {
			rel := 1
			if p.Relevance != nil {
				rel = *p.Relevance
			}
			q[p.ID] = rel
		}
		qrels[tu.ConvID+"_"+strconv.Itoa(tu.Turn)] = q
	}
	recall := func(field string) float64 {
		run := filepath.Join(t.TempDir(), field+".trec")
		if _, err := runCLI(t, "search", "--kb", kb, "--trec-run", run, "--queries", queries, "--field", field,
			"--set", "retrieval.candidates=20"); err != nil {
			t.Fatal(err)
		}
		ranked := readTRECRun(t, run)
		if len(ranked) != len(turns) {
			t.Fatalf("%s run has %d queries, want %d", field, len(ranked), len(turns))
		}
		var sum float64
		for qid, r := range ranked {
			q, ok := qrels[qid]
			if !ok {
				t.Fatalf("unknown qid %q in the run", qid)
			}
			sum += ir.Recall(r, q, 10)
		}
		return sum / float64(len(ranked))
	}
	rw, raw := recall("rewrite"), recall("question")
	t.Logf("demo eval Recall@10: rewrite %.3f, question %.3f", rw, raw)
	if rw <= raw+0.1 {
		t.Fatalf("Recall@10 with the human rewrite (%.3f) should clearly beat the raw question (%.3f)", rw, raw)
	}
}

// readTRECRun parses "qid Q0 docno rank score tag" lines, checking ranks
// ascend and scores do not increase within a query.
func readTRECRun(t *testing.T, path string) map[string][]retrieval.Scored {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]retrieval.Scored{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 6 || fs[1] != "Q0" {
			t.Fatalf("bad TREC line %q", sc.Text())
		}
		rank, _ := strconv.Atoi(fs[3])
		score, _ := strconv.ParseFloat(fs[4], 64)
		prev := out[fs[0]]
		if rank != len(prev)+1 || (len(prev) > 0 && score > prev[len(prev)-1].Score) {
			t.Fatalf("ranks or scores out of order at %q", sc.Text())
		}
		out[fs[0]] = append(prev, retrieval.Scored{ID: fs[2], Score: score})
	}
	return out
}

func TestMemoryBuildThenSearchActivatesTheUsersQueries(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): builds the demo's memory and searches every turn through the CLI")
	}
	demo := filepath.Join(sharedtest.RepoRoot(t), "datasets", "demo")
	parts := filepath.Join(t.TempDir(), "mem.parquet")
	if _, err := runCLI(t, "memory", "build", "--from", filepath.Join(demo, "train.jsonl"), "--out", parts); err != nil {
		t.Fatal(err)
	}
	turns, _, err := datasets.LoadContext(t.Context(), filepath.Join(demo, "train.jsonl"), datasets.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	user := turns[0].ConvID
	asked := map[string]bool{}
	for _, tu := range turns {
		if tu.ConvID == user {
			asked[tu.Question] = true
		}
	}
	query := turns[0].Question
	out, err := runCLI(t, "search", "--kb", filepath.Join(demo, "passages.jsonl"), "--memory", parts,
		"--user", user, "--query", query, "--json", query)
	if err != nil {
		t.Fatal(err)
	}
	var r searchJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Trace.Memories) == 0 || len(r.Trace.Memories) > 5 {
		t.Fatalf("activated %d memories, want 1..5 (top_n)", len(r.Trace.Memories))
	}
	for _, m := range r.Trace.Memories {
		if !asked[m.Text] {
			t.Errorf("activated %q, which user %s never asked", m.Text, user)
		}
		if m.Text == query {
			t.Errorf("the current query was activated as its own memory")
		}
	}
	if len(r.Chunks) == 0 {
		t.Fatal("no chunks")
	}
}

// A TREC run is written whole or not at all: when a query fails after
// others have been retrieved, no run file (not even an empty or partial one,
// which would score as a run that retrieved nothing) is left behind. The
// service answers the start-up probe and the first query, then refuses.
func TestTRECRunLeavesNoFileWhenAQueryFails(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) > 2 {
			w.WriteHeader(http.StatusBadRequest) // a 4xx is not retried
			fmt.Fprint(w, `{"error": "refused"}`)
			return
		}
		fmt.Fprint(w, `{"result": [[{"document": {"id": "d1", "contents": "garage door"}, "score": 2}]]}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	queries := filepath.Join(dir, "q.jsonl")
	if err := os.WriteFile(queries, []byte("{\"qid\":\"a\",\"text\":\"garage\"}\n{\"qid\":\"b\",\"text\":\"door\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run.trec")
	_, err := runCLI(t, "search", "--method", "remote", "--set", "retrieval.remote.url=["+srv.URL+"]",
		"--queries", queries, "--trec-run", out)
	if err == nil || !strings.Contains(err.Error(), "query b") {
		t.Fatalf("got %v, want the failure of query b", err)
	}
	if calls.Load() != 3 {
		t.Fatalf("%d calls to the service, want the probe, query a and query b", calls.Load())
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "q.jsonl" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// memory show --user lists that user's memories; a user the file lacks (a
// mistyped id, most likely) is an error naming some of the users it has,
// where it printed "0 users shown".
func TestMemoryShowUser(t *testing.T) {
	dir := t.TempDir()
	from := filepath.Join(dir, "m.jsonl")
	if err := os.WriteFile(from, []byte(`{"user":"ann","text":"I keep bees."}
{"user":"bob","text":"How do wasps build nests?"}
{"user":"bob","text":"Are hornets wasps?"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	parts := filepath.Join(dir, "mem.parquet")
	if _, err := runCLI(t, "memory", "build", "--from", from, "--out", parts); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "memory", "show", parts, "--user", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "3 memories, 1 user shown") || !strings.Contains(out, "user bob") ||
		!strings.Contains(out, "Are hornets wasps?") || strings.Contains(out, "bees") {
		t.Errorf("memory show --user bob:\n%s", out)
	}
	_, err = runCLI(t, "memory", "show", parts, "--user", "bobb")
	if err == nil || !strings.Contains(err.Error(), `has no user "bobb"; it has 2: ann, bob`) {
		t.Errorf("memory show --user bobb: got %v", err)
	}
	// search says why a user activates nothing when the store lacks them.
	kb := filepath.Join(sharedtest.RepoRoot(t), "datasets", "demo", "passages.jsonl")
	for user, want := range map[string]bool{"bobb": true, "bob": false} {
		out, err := runCLI(t, "search", "--kb", kb, "--memory", parts, "--user", user, "wasps")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out, `the memory store has no user "`+user+`"`); got != want {
			t.Errorf("search --user %s: note %v, want %v:\n%s", user, got, want, out)
		}
	}
}
