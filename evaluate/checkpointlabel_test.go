package evaluate

import (
	"bytes"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/stats"
)

// A system that is a run checkpoint names it on each of its table rows; the
// others are shown by name alone.
func TestMarkdownNamesThePolicyCheckpoint(t *testing.T) {
	d := stats.Comparison{Diff: 0.1, Lo: 0.05, Hi: 0.15, P: 0.01}
	rep := Report{Turns: 2, Conversations: 1, Stats: stats.Config{Level: 0.95, Resamples: 100}, Systems: []SystemReport{
		{Name: "raw", Turns: 2, Metrics: map[string]stats.Estimate{MRecall10: {Mean: 0.3}}},
		{Name: "policy", Checkpoint: "best: step 275, eval.policy.recall_10 0.4390", Turns: 2, Baseline: "raw",
			Metrics: map[string]stats.Estimate{MRecall10: {Mean: 0.4}}, VsBaseline: map[string]stats.Comparison{MRecall10: d}},
	}}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	label := "| policy (best: step 275, eval.policy.recall_10 0.4390) |"
	rows := 0
	for _, line := range strings.Split(md.String(), "\n") {
		if strings.HasPrefix(line, "| policy") {
			rows++
			if !strings.HasPrefix(line, label) {
				t.Errorf("policy row without its checkpoint: %s", line)
			}
		}
	}
	if rows != 2 || !strings.Contains(md.String(), "| raw | 0/2 |") {
		t.Fatalf("want 2 labelled policy rows and a plain raw row:\n%s", md.String())
	}
}

// With one conversation the cluster bootstrap resamples the same turns every
// time: the table says so instead of letting a zero-width interval read as
// certainty; with two or more it says nothing.
func TestMarkdownSaysOneConversationHasNoInterval(t *testing.T) {
	for _, convs := range []int{1, 2} {
		rep := Report{Turns: 3, Conversations: convs, Stats: stats.Config{Level: 0.95, Resamples: 100}, Systems: []SystemReport{
			{Name: "raw", Turns: 3, Metrics: map[string]stats.Estimate{MRecall10: {Mean: 0.3, Lo: 0.3, Hi: 0.3}}},
		}}
		var md bytes.Buffer
		if err := WriteMarkdown(&md, rep); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(md.String(), "One conversation: the bootstrap has nothing to resample"); got != (convs == 1) {
			t.Errorf("%d conversations: note shown %v, want %v:\n%s", convs, got, convs == 1, md.String())
		}
		want := map[int]string{1: "3 turns in 1 conversation (", 2: "3 turns in 2 conversations ("}[convs]
		if !strings.HasPrefix(md.String(), want) {
			t.Errorf("%d conversations: first line %q, want it to start %q", convs, strings.SplitN(md.String(), "\n", 2)[0], want)
		}
	}
}
