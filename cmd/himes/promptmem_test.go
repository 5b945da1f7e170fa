package main

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/trainer"
)

// Memories as rewriter input on the quickstart's demo conversations (user =
// conversation): every prompt's memories are questions its conversation
// asked before the turn, never the turn's own or a later one; a
// conversation's earliest turn has none; the eval path's renderer gives the same memories; and with the
// default template every prompt byte equals the switch-off prompt.
func TestPromptMemoriesCausalOnDemoData(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	load := func(sets ...string) *components {
		t.Helper()
		cfg, err := configs.Load("../../configs/quickstart.yaml", append([]string{"run.output_dir=" + dir}, sets...))
		if err != nil {
			t.Fatal(err)
		}
		c, err := buildComponents(ctx, cfg, buildOptions{trainerDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	on := load("data.prompt.memories.enabled=true", "data.prompt.memories.top_n=50")
	off := load()
	if off.causal != nil {
		t.Fatal("switch and retrieval memory off: a long-term memory was built")
	}
	cfgOn, err := configs.Load("../../configs/quickstart.yaml", []string{"data.prompt.memories.enabled=true", "data.prompt.memories.top_n=50"})
	if err != nil {
		t.Fatal(err)
	}
	evalRenderer, err := on.newRenderer(cfgOn)
	if err != nil {
		t.Fatal(err)
	}
	all := dedupTurns(on.Train, on.Eval)
	earliest := map[string]int{}
	for _, turn := range all {
		if e, ok := earliest[turn.ConvID]; !ok || turn.Turn < e {
			earliest[turn.ConvID] = turn.Turn
		}
	}
	shown, firsts := 0, 0
	for _, turn := range all {
		p, err := on.Renderer.RenderContext(ctx, turn)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range p.Memories {
			conv, num, ok := strings.Cut(strings.TrimPrefix(m.ID, "q:"), "#")
			n, _ := strconv.Atoi(num)
			if !ok || conv != turn.ConvID || n >= turn.Turn {
				t.Errorf("turn %s shows memory %s (%q): not a question its user asked before it", turn.ID(), m.ID, m.Text)
			}
			if m.Text == strings.TrimSpace(turn.Question) && n == turn.Turn {
				t.Errorf("turn %s shows its own question", turn.ID())
			}
		}
		shown += len(p.Memories)
		if turn.Turn == earliest[turn.ConvID] {
			firsts++
			if len(p.Memories) != 0 {
				t.Errorf("first turn %s shows memories %v", turn.ID(), p.Memories)
			}
		}
		q, err := evalRenderer.RenderContext(ctx, turn)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Errorf("turn %s: the eval renderer's prompt differs from training's", turn.ID())
		}
		o, err := off.Renderer.RenderContext(ctx, turn)
		if err != nil {
			t.Fatal(err)
		}
		if o.Memories != nil {
			t.Errorf("switch off: turn %s has memories", turn.ID())
		}
		p.Memories = nil
		if !reflect.DeepEqual(p, o) {
			t.Errorf("turn %s: default template, the switch changed the prompt", turn.ID())
		}
		raw, _ := json.Marshal(trainer.PromptFromRendered(turn.ID(), o))
		if strings.Contains(string(raw), "memories") {
			t.Errorf("switch off: the trainer prompt carries memories: %s", raw)
		}
	}
	if shown == 0 || firsts == 0 {
		t.Fatalf("%d memories shown, %d first turns: the test checked nothing", shown, firsts)
	}
	t.Logf("%d memories shown over %d turns", shown, len(all))
}

// The switch names its key when misconfigured, and `himes prep`, which has
// no long-term memory, refuses it rather than exporting SFT prompts without
// the memories training would show.
func TestPromptMemoriesBadConfig(t *testing.T) {
	_, err := configs.Load("../../configs/quickstart.yaml", []string{"data.prompt.memories.enabled=true", "data.prompt.memories.top_n=0"})
	if err == nil || !strings.Contains(err.Error(), "data.prompt.memories.top_n") {
		t.Errorf("top_n 0: %v", err)
	}
	_, err = configs.Load("../../configs/quickstart.yaml", []string{"data.prompt.memories.top_n=-2"})
	if err == nil || !strings.Contains(err.Error(), "data.prompt.memories.top_n") {
		t.Errorf("top_n -2: %v", err)
	}
	cfg := datasets.DefaultPromptConfig()
	cfg.Memories.Enabled = true
	if _, err := datasets.NewRenderer(cfg); err == nil || !strings.Contains(err.Error(), "himes prep") {
		t.Errorf("no memory source: %v", err)
	}
}
