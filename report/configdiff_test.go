package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestConfigDiffListsOnlyDifferingKeys(t *testing.T) {
	a := "run:\n  name: s-seed_1\n  seed: 1\nreward:\n  alpha: 0.5\n  beta: 1\ngrpo:\n  loss:\n    type: grpo\ndata:\n  eval: [a.jsonl, b.jsonl]\ntrainer:\n  token: sesame\n"
	b := "run:\n  name: s-seed_2\n  seed: 2\nreward:\n  alpha: 0.5\n  beta: 1\ngrpo:\n  loss:\n    type: dapo\ndata:\n  eval: [a.jsonl]\ntrainer:\n  token: $HIMES_TOKEN\n"
	sums := []Summary{{Name: "s-seed_1", Config: a}, {Name: "s-seed_2", Config: b}, {Name: "old", Dir: "old"}}
	diff, err := ConfigDiff(sums)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(diff)
	want := "[{data.eval [[\"a.jsonl\",\"b.jsonl\"] [\"a.jsonl\"] –]} {grpo.loss.type [grpo dapo –]} {reward.alpha [0.5 0.5 –]} " +
		"{reward.beta [1 1 –]} {run.seed [1 2 –]} {trainer.token [(literal, redacted) $HIMES_TOKEN –]}]"
	if got != want {
		t.Fatalf("diff\n%s\nwant\n%s", got, want)
	}
	// Without the config-less run, only the keys that really differ remain.
	diff, _ = ConfigDiff(sums[:2])
	var keys []string
	for _, d := range diff {
		keys = append(keys, d.Key)
	}
	if fmt.Sprint(keys) != "[data.eval grpo.loss.type run.seed trainer.token]" {
		t.Fatalf("keys %v", keys)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, sums[:2], nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "## Config differences\n\n| key | s-seed_1 | s-seed_2 |\n|---|---|---|\n| data.eval |") ||
		!strings.Contains(md.String(), "| run.seed | 1 | 2 |") || strings.Contains(md.String(), "sesame") {
		t.Errorf("markdown:\n%s", md.String())
	}
	var html bytes.Buffer
	if err := WriteHTML(&html, sums[:2], nil, 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html.String(), "<tr><td>run.seed</td><td>1</td><td>2</td></tr>") {
		t.Errorf("html lacks the run.seed row")
	}
	if d, _ := ConfigDiff(sums[:1]); d != nil {
		t.Errorf("one run: %v", d)
	}
	if _, err := ConfigDiff([]Summary{{Config: "a: [", Dir: "x"}, {Config: "a: 1"}}); err == nil || !strings.Contains(err.Error(), "config.yaml of x") {
		t.Errorf("bad YAML: %v", err)
	}
}
