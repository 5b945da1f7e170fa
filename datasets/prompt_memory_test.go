package datasets

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func memSource(mems ...PromptMemory) MemorySource {
	return func(_ context.Context, t Turn) ([]PromptMemory, error) {
		if t.User != "ann" {
			return nil, nil
		}
		return mems, nil
	}
}

// With the default template the switch changes no prompt byte: memories
// travel in Prompt.Memories only; a template that ranges over .Memories
// shows them.
func TestRenderMemories(t *testing.T) {
	turn := Turn{ConvID: "c", Turn: 2, User: "ann", Question: "What about its cost?", History: hist("Tell me about the Tesla Model 3.", "It is an electric car.")}
	mems := []PromptMemory{{ID: "f1", Text: "I drive a Tesla", Score: 0.75}, {ID: "q:c#1", Text: "electric cars", Score: 0.5}}
	off, err := NewRenderer(DefaultPromptConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultPromptConfig()
	cfg.Memories.Enabled = true
	on, err := NewRenderer(cfg, WithMemories(memSource(mems...)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := off.Render(turn)
	if err != nil {
		t.Fatal(err)
	}
	b, err := on.RenderContext(t.Context(), turn)
	if err != nil {
		t.Fatal(err)
	}
	if a.Memories != nil || !reflect.DeepEqual(b.Memories, mems) {
		t.Errorf("memories off %v, on %v; want none and %v", a.Memories, b.Memories, mems)
	}
	b.Memories = nil
	if !reflect.DeepEqual(a, b) {
		t.Errorf("default template: the switch changed the prompt:\n%+v\n%+v", a, b)
	}

	cfg.Template = "{{range .Memories}}[{{.ID}} {{printf \"%.2f\" .Score}}] {{.Text}}\n{{end}}Q: {{.Question}}"
	shown, err := NewRenderer(cfg, WithMemories(memSource(mems...)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := shown.Render(turn)
	if err != nil {
		t.Fatal(err)
	}
	if want := "[f1 0.75] I drive a Tesla\n[q:c#1 0.50] electric cars\nQ: What about its cost?"; p.User != want {
		t.Errorf("template with memories:\n%q\nwant\n%q", p.User, want)
	}
	bob := turn
	bob.User = "bob"
	if p, err := shown.Render(bob); err != nil || p.User != "Q: What about its cost?" || p.Memories != nil {
		t.Errorf("a user without memories: %q, %v, %v", p.User, p.Memories, err)
	}
	// the same template with the switch off renders no memories
	cfg.Memories.Enabled = false
	plain, err := NewRenderer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := plain.Render(turn); err != nil || p.User != "Q: What about its cost?" {
		t.Errorf("switch off: %q, %v", p.User, err)
	}
}

// A failed memory lookup fails the render, naming the turn; the switch
// without a memory source is refused when the renderer is built.
func TestRenderMemoriesErrors(t *testing.T) {
	cfg := DefaultPromptConfig()
	cfg.Memories.Enabled = true
	boom := errors.New("embedder down")
	r, err := NewRenderer(cfg, WithMemories(func(context.Context, Turn) ([]PromptMemory, error) { return nil, boom }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Render(Turn{ConvID: "c", Turn: 4, Question: "q"}); !errors.Is(err, boom) || !strings.Contains(err.Error(), "c#4") {
		t.Errorf("source error: %v", err)
	}
	if _, err := NewRenderer(cfg); err == nil || !strings.Contains(err.Error(), "memories.enabled") {
		t.Errorf("no source: %v", err)
	}
}

func TestPromptMemoriesValidate(t *testing.T) {
	for _, c := range []struct {
		enabled bool
		n       int
		ok      bool
	}{{false, 0, true}, {true, 1, true}, {true, 100, true}, {true, 0, false}, {false, -1, false}, {true, 101, false}} {
		cfg := DefaultPromptConfig()
		cfg.Memories.Enabled, cfg.Memories.TopN = c.enabled, c.n
		err := cfg.Validate()
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "memories.top_n")) {
			t.Errorf("enabled %v top_n %d: %v", c.enabled, c.n, err)
		}
	}
	// a template using .Memories validates with the switch off or on
	cfg := DefaultPromptConfig()
	cfg.Template = "{{range .Memories}}{{.Text}} {{.Score}} {{.ID}}{{end}}{{.Question}}"
	if err := cfg.Validate(); err != nil {
		t.Errorf("template with .Memories: %v", err)
	}
	cfg.Memories.Enabled = true
	if err := cfg.Validate(); err != nil {
		t.Errorf("template with .Memories, switch on: %v", err)
	}
	cfg.Template = "{{range .Memories}}{{.Nope}}{{end}}"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "template") {
		t.Errorf("template with an unknown memory field: %v", err)
	}
}
