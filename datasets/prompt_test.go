package datasets

import (
	"reflect"
	"strings"
	"testing"
)

func hist(texts ...string) []Message {
	var h []Message
	for i, s := range texts {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		h = append(h, Message{Role: role, Text: s})
	}
	return h
}

func TestRenderDefaultTemplate(t *testing.T) {
	cfg := DefaultPromptConfig()
	cfg.System = "SYS"
	cfg.Instruction = "INSTR"
	r, err := NewRenderer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	turn := Turn{ConvID: "c", Turn: 2, Question: " What about its cost? ", History: hist("Tell me about the Tesla Model 3.", "It is an electric car.")}
	p, err := r.Render(turn)
	if err != nil {
		t.Fatal(err)
	}
	wantUser := "INSTR\n\nConversation:\nUser: Tell me about the Tesla Model 3.\nAssistant: It is an electric car.\n\nQuestion: What about its cost?\nRewrite:"
	if p.User != wantUser {
		t.Errorf("user message:\n%q\nwant\n%q", p.User, wantUser)
	}
	if want := "SYS\n\n" + wantUser + "\n"; p.Text != want {
		t.Errorf("flat text:\n%q\nwant\n%q", p.Text, want)
	}
	wantMsgs := []Message{{"system", "SYS"}, {"user", wantUser}}
	if !reflect.DeepEqual(p.Messages, wantMsgs) {
		t.Errorf("messages = %q", p.Messages)
	}
	if p.Question != "What about its cost?" || !reflect.DeepEqual(p.History, turn.History) {
		t.Errorf("question %q history %v", p.Question, p.History)
	}

	// No history: no "Conversation:" block; no system: one message.
	cfg.System = ""
	r, _ = NewRenderer(cfg)
	p, err = r.Render(Turn{ConvID: "c", Turn: 1, Question: "Who wrote Dune?"})
	if err != nil {
		t.Fatal(err)
	}
	if p.User != "INSTR\n\nQuestion: Who wrote Dune?\nRewrite:" || len(p.Messages) != 1 || p.Text != "INSTR\n\nQuestion: Who wrote Dune?\nRewrite:\n" {
		t.Errorf("no history: user %q text %q messages %d", p.User, p.Text, len(p.Messages))
	}
	if _, err := r.Render(Turn{ConvID: "c", Turn: 1}); err == nil || !strings.Contains(err.Error(), "c#1") {
		t.Errorf("a turn without a question: got %v", err)
	}
}

func TestWindowLimits(t *testing.T) {
	h := hist("u1 a b", "a1 c d", "u2 e f", "a2 g h", "u3 i j", "a3 k l")
	cases := []struct {
		name string
		cfg  PromptConfig
		want []Message
	}{
		{"all", PromptConfig{IncludeAssistant: true}, h},
		{"last two user turns", PromptConfig{MaxTurns: 2, IncludeAssistant: true}, h[2:]},
		{"more turns than history", PromptConfig{MaxTurns: 9, IncludeAssistant: true}, h},
		{"users only", PromptConfig{MaxTurns: 2}, []Message{h[2], h[4]}},
		// Each message is 6 characters: 20 characters fit the last three.
		{"char budget", PromptConfig{MaxChars: 20, IncludeAssistant: true}, h[3:]},
		// Each message is 3 approximate tokens ("u1", "a", "b"): 7 fit two.
		{"token budget", PromptConfig{MaxTokens: 7, IncludeAssistant: true}, h[4:]},
		{"newest message cut to the budget", PromptConfig{MaxChars: 4, IncludeAssistant: true}, []Message{{"assistant", "a3…"}}},
		{"per-message cut", PromptConfig{MaxTurns: 1, MaxMessageChars: 5, IncludeAssistant: true}, []Message{{"user", "u3 i…"}, {"assistant", "a3 k…"}}},
	}
	for _, c := range cases {
		c.cfg.Template = "x"
		r, err := NewRenderer(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Window(h); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func TestWindowDoesNotAliasInput(t *testing.T) {
	h := hist("one two three four", "five")
	r, _ := NewRenderer(PromptConfig{Template: "x", MaxMessageChars: 8, IncludeAssistant: true})
	w := r.Window(h)
	w[0].Text = "changed"
	if h[0].Text != "one two three four" {
		t.Error("Window modified its input")
	}
}

func TestTokenCounterOption(t *testing.T) {
	h := hist("a b c d", "e f g h")
	// A counter that says every message costs 10 tokens: budget 15 keeps one.
	r, _ := NewRenderer(PromptConfig{Template: "x", MaxTokens: 15, IncludeAssistant: true}, WithTokenCounter(func(string) int { return 10 }))
	if got := r.Window(h); len(got) != 1 || got[0].Text != "e f g h" {
		t.Errorf("got %q", got)
	}
}

func TestApproxTokens(t *testing.T) {
	for s, want := range map[string]int{
		"":                 0,
		"hello":            1,
		"Hello, world!":    4,
		"it's 3.5 km":      7, // it ' s 3 . 5 km
		"naïve café":       2,
		"  spaced   out  ": 2,
		"e-mail":           3,
	} {
		if got := ApproxTokens(s); got != want {
			t.Errorf("ApproxTokens(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestTruncateWords(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"the quick brown fox", 12, "the quick…"},
		{"abcdefghijkl", 5, "abcd…"},
		{"héllo wörld again", 9, "héllo…"},
		{"anything", 1, "…"},
	} {
		if got := truncateWords(c.s, c.n); got != c.want {
			t.Errorf("truncateWords(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

func TestRendererTemplateErrors(t *testing.T) {
	if _, err := NewRenderer(PromptConfig{Template: "{{.Nope}}"}); err == nil {
		t.Error("a template naming an unknown field should fail at construction")
	}
	if _, err := NewRenderer(PromptConfig{Template: "{{if}}"}); err == nil {
		t.Error("a template that does not parse should fail")
	}
	cfg := DefaultPromptConfig()
	cfg.Template = "{{range .History}}{{.Role}}|{{end}}{{.ConvID}}#{{.Turn}} {{trim .Question}}"
	r, err := NewRenderer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Render(Turn{ConvID: "c", Turn: 3, Question: "q", History: hist("a", "b")})
	if err != nil || p.User != "user|assistant|c#3 q" {
		t.Errorf("custom template: %q, %v", p.User, err)
	}
}

func TestPromptConfigValidate(t *testing.T) {
	if err := DefaultPromptConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	c := DefaultPromptConfig()
	c.MaxChars = -1
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "max_chars:") {
		t.Errorf("got %v", err)
	}
	c = DefaultPromptConfig()
	c.Template = "{{.Missing}}"
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "template:") {
		t.Errorf("got %v", err)
	}
}
