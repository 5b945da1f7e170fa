package grpo

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/himes-rl/himes/internal/rundir"
)

// A ledger file holds at most ledger_steps steps, a checkpoint closes the
// open file, and so does the end of the run: with ledger_steps 3 and
// checkpoints at 5 and 7 (the last step), the files are 1-3, 4-5 and 6-7,
// each with its steps' 2 × 4 rollouts.
func TestLedgerFilesFollowLedgerStepsAndCheckpoints(t *testing.T) {
	run, err := rundir.Open(t.TempDir(), "r", rundir.New)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	cfg := testConfig()
	cfg.Steps, cfg.LedgerSteps, cfg.CheckpointEvery = 7, 3, 5
	if err := newTestLoop(t, cfg, newFakePolicy(" paris", ""), run).Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	files, err := rundir.LedgerFiles(run.Path)
	if err != nil {
		t.Fatal(err)
	}
	var got [][2]int
	for _, f := range files {
		got = append(got, [2]int{f.First, f.Last})
	}
	if want := [][2]int{{1, 3}, {4, 5}, {6, 7}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ledger files %v, want %v", got, want)
	}
	recs := stepLedgers(t, run.Path)
	for step := 1; step <= 7; step++ {
		if len(recs[step]) != 8 {
			t.Errorf("step %d: %d records, want 8", step, len(recs[step]))
		}
	}
	// The checkpoint of step 5 covers 1-3 and 4-5, not 6-7.
	b, err := os.ReadFile(filepath.Join(run.Path, "state", "step-000005.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Ledgers map[string]string `json:"ledgers"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range st.Ledgers {
		names = append(names, n)
	}
	sort.Strings(names)
	if want := []string{"steps-000001-000003.parquet", "steps-000004-000005.parquet"}; !reflect.DeepEqual(names, want) {
		t.Errorf("checkpoint 5 covers %v, want %v", names, want)
	}
}
