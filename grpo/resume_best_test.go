package grpo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/rundir"
)

// bestRun trains 4 steps whose best evaluation is step 2 (Recall@10 by
// version: 0, .5, 1, .5, .5), every checkpoint kept, and returns the run's
// parent directory and the policy.
func bestRun(t *testing.T) (string, *fakePolicy) {
	t.Helper()
	base, run, pol := freshRun(t)
	defer run.Close()
	if err := newBestLoop(t, bestConfig(4, 0, 0), pol, run, bestHits).Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	return base, pol
}

var bestHits = []int{0, 1, 2, 1, 1, 0, 1}

func resumeBest(t *testing.T, base string, pol *fakePolicy, repair bool) error {
	t.Helper()
	run, err := rundir.Open(base, "r", rundir.Resume)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	l := newBestLoop(t, bestConfig(5, 0, 0), pol, run, bestHits)
	l.repair = repair
	return l.Run(context.Background(), true)
}

// Item 2 of issue 27: state/best.json corrupted or deleted went unnoticed on
// resume; "best" then failed later. A resume now rebuilds it from the best
// step's checkpoint, with a warning.
func TestResumeRebuildsADamagedBestFile(t *testing.T) {
	for name, damage := range map[string]func(string){
		"deleted": func(p string) { _ = os.Remove(p) },
		"a digit changed": func(p string) {
			b, _ := os.ReadFile(p)
			i := strings.Index(string(b), `"policy_version": 2`)
			if i < 0 {
				t.Fatalf("no policy_version 2 in %s", b)
			}
			b[i+len(`"policy_version": `)] = '3'
			_ = os.WriteFile(p, b, 0o644)
		},
		"truncated": func(p string) {
			b, _ := os.ReadFile(p)
			_ = os.WriteFile(p, b[:len(b)/2], 0o644)
		},
	} {
		t.Run(name, func(t *testing.T) {
			base, pol := bestRun(t)
			bestPath := filepath.Join(base, "r", "state", "best.json")
			want, _ := os.ReadFile(bestPath)
			damage(bestPath)
			if err := resumeBest(t, base, pol, false); err != nil {
				t.Fatal(err)
			}
			best, err := LoadCheckpointState(&rundir.RunDir{Path: filepath.Join(base, "r")}, "best")
			if err != nil {
				t.Fatalf("best after the resume: %v", err)
			}
			if best.Step != 2 || best.PolicyVersion != 2 || best.Best == nil || best.Best.Value != 1 {
				t.Fatalf("best state %+v (best %+v), want step 2 at version 2, value 1", best, best.Best)
			}
			if got, _ := os.ReadFile(bestPath); string(got) != string(want) {
				t.Fatalf("rebuilt best.json differs from the one himes wrote:\n%s\n%s", got, want)
			}
		})
	}
}

// When the best step's checkpoint is gone too, the resume stops with a
// clear error; --repair forgets the best and says so.
func TestResumeRefusesALostBestFile(t *testing.T) {
	base, pol := bestRun(t)
	_ = os.Remove(filepath.Join(base, "r", "state", "best.json"))
	_ = os.Remove(statePath(base, 2))
	err := resumeBest(t, base, pol, false)
	if err == nil || !strings.Contains(err.Error(), "best.json") || !strings.Contains(err.Error(), "--repair") {
		t.Fatalf("got %v, want an error naming best.json and --repair", err)
	}
	if err := resumeBest(t, base, pol, true); err != nil {
		t.Fatal(err)
	}
	if r := repairReportOf(t, base); !strings.Contains(r, "best checkpoint") {
		t.Fatalf("repair report %s does not name the lost best checkpoint", r)
	}
}
