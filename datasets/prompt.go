package datasets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"unicode"
	"unicode/utf8"

	"github.com/himes-rl/himes/internal/fielderr"
)

// PromptConfig renders the rewriter's input. The same rendering feeds chat
// models (a system and a user message) and completion models (one string).
type PromptConfig struct {
	// System is the system message ("" for none).
	System string `yaml:"system"`
	// Instruction is available to the template as {{.Instruction}}.
	Instruction string `yaml:"instruction"`
	// Template renders the user message (Go text/template). Fields:
	// .Instruction, .History ([]{Role, Text}, the window after the limits
	// below), .Question, .ConvID, .Turn, .Memories ([]{ID, Text, Score}, the
	// user's activated long-term memories when memories.enabled, best
	// first; empty otherwise). Functions: speaker ("user" → "User",
	// "assistant" → "Assistant"), trim.
	Template string `yaml:"template"`
	// MaxTurns keeps the last N user turns of the history, each with the
	// assistant replies that follow it; 0 keeps all.
	MaxTurns int `yaml:"max_turns"`
	// MaxMessageChars cuts each history message to this many characters (at
	// a word boundary, marked "…"); 0 keeps messages whole. CAsT replies are
	// whole passages, and one would otherwise crowd out the rest.
	MaxMessageChars int `yaml:"max_message_chars"`
	// MaxChars is the character budget of the history window: the oldest
	// messages are dropped until the rest fits; 0 = no limit.
	MaxChars int `yaml:"max_chars"`
	// MaxTokens is the same budget in tokens, counted by the renderer's
	// token counter (by default words and punctuation marks, a close proxy
	// for subword tokens; see WithTokenCounter); 0 = no limit.
	MaxTokens int `yaml:"max_tokens"`
	// IncludeAssistant keeps the assistant replies in the history; false
	// shows only the user's earlier questions.
	IncludeAssistant bool `yaml:"include_assistant"`
	// Memories hands the user's activated long-term memories to the
	// rewriter (an ablation, off by default: HiMeS keeps memories out of
	// prompts and uses them only to re-rank).
	Memories PromptMemoryConfig `yaml:"memories"`
}

// PromptMemoryConfig configures memories as rewriter input. When enabled,
// each turn's memory is activated causally (the user's facts and the
// questions they asked before this turn, never this turn's own or a later
// question) with the raw question as the query and retrieval.memory's
// taxonomy, classifier and signals, and the top_n memories go to the
// template (.Memories) and to the trainer (prompt.dialogue.memories, which
// the embedded policy draws candidate terms from).
type PromptMemoryConfig struct {
	// Enabled turns memories as rewriter input on (default false). The
	// long-term memory is built from the data even when
	// retrieval.memory.enabled is false (then memories do not re-rank).
	Enabled bool `yaml:"enabled"`
	// TopN memories activated for the prompt (default 3).
	TopN int `yaml:"top_n"`
}

// maxPromptMemories bounds memories.top_n: a typo must not put thousands
// of memories into every prompt.
const maxPromptMemories = 100

// DefaultPromptTemplate is the default user message.
const DefaultPromptTemplate = `{{.Instruction}}

{{if .History}}Conversation:
{{range .History}}{{speaker .Role}}: {{.Text}}
{{end}}
{{end}}Question: {{.Question}}
Rewrite:
`

// DefaultPromptConfig returns the documented defaults.
func DefaultPromptConfig() PromptConfig {
	return PromptConfig{
		System: "You rewrite the last question of a conversation into a self-contained search query. " +
			"Resolve pronouns, ellipsis and references from the conversation, keep the user's intent, and add nothing else. " +
			"If the question is already self-contained, repeat it unchanged.",
		Instruction:      "Rewrite the question so that it can be understood without the conversation. Reply with the rewritten question only.",
		Template:         DefaultPromptTemplate,
		MaxTurns:         5,
		MaxMessageChars:  1000,
		MaxChars:         5000,
		IncludeAssistant: true,
		Memories:         PromptMemoryConfig{TopN: 3},
	}
}

// Validate checks the limits and that the template parses.
func (c PromptConfig) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"max_turns", c.MaxTurns}, {"max_message_chars", c.MaxMessageChars}, {"max_chars", c.MaxChars}, {"max_tokens", c.MaxTokens}} {
		if f.v < 0 {
			return fielderr.New(f.name, "must be ≥ 0 (0 = no limit), got %d", f.v)
		}
	}
	if c.Memories.TopN < 0 || c.Memories.TopN > maxPromptMemories || (c.Memories.Enabled && c.Memories.TopN == 0) {
		return fielderr.New("memories.top_n", "must be in [1, %d], got %d", maxPromptMemories, c.Memories.TopN)
	}
	if strings.TrimSpace(c.Template) == "" {
		return fielderr.New("template", "is required")
	}
	// the template is checked without a memory source: the command wires it
	if _, err := NewRenderer(c, WithMemories(func(context.Context, Turn) ([]PromptMemory, error) { return nil, nil })); err != nil {
		return fielderr.New("template", "%v", err)
	}
	return nil
}

// Prompt is one rendered rewriter input.
type Prompt struct {
	System, User string    // chat form: a system message and a user message
	Text         string    // flat completion-model form: System, a blank line, the user message
	Messages     []Message // [{system, System}, {user, User}]; no system message when System is ""
	History      []Message // the history window actually used (after max_turns and the budgets)
	Question     string
	// Memories are the activated memories the prompt was rendered with
	// (memories.enabled; nil otherwise).
	Memories []PromptMemory
}

// PromptMemory is one activated long-term memory shown to the rewriter.
type PromptMemory struct {
	ID    string
	Text  string
	Score float64 // activation score (memory.Score)
}

// MemorySource returns the memories a turn's prompt shows: what the turn's
// user had before the turn, best first.
type MemorySource func(ctx context.Context, t Turn) ([]PromptMemory, error)

// PromptData is what the template sees.
type PromptData struct {
	Instruction string
	History     []Message
	Question    string
	ConvID      string
	Turn        int
	Memories    []PromptMemory
}

// Renderer renders turns into prompts. It is safe for concurrent use.
type Renderer struct {
	cfg    PromptConfig
	tmpl   *template.Template
	tokens func(string) int
	mems   MemorySource
}

// RendererOption adjusts a Renderer.
type RendererOption func(*Renderer)

// WithTokenCounter counts tokens for PromptConfig.MaxTokens with the
// policy's own tokenizer instead of the default approximation.
func WithTokenCounter(count func(string) int) RendererOption {
	return func(r *Renderer) { r.tokens = count }
}

// WithMemories is where the renderer takes each turn's memories from when
// PromptConfig.Memories.Enabled (required then).
func WithMemories(src MemorySource) RendererOption {
	return func(r *Renderer) { r.mems = src }
}

// errNoMemorySource: memories as rewriter input asked for where no
// long-term memory is wired.
var errNoMemorySource = errors.New("memories.enabled: this command renders prompts without long-term memory (no memory source is wired; `himes prep` exports SFT data without memories), turn it off for this command")

// NewRenderer parses the template; unknown fields are template errors.
func NewRenderer(cfg PromptConfig, opts ...RendererOption) (*Renderer, error) {
	funcs := template.FuncMap{
		"speaker": func(role string) string {
			if role == "" {
				return ""
			}
			r, n := utf8.DecodeRuneInString(role)
			return string(unicode.ToUpper(r)) + role[n:]
		},
		"trim": strings.TrimSpace,
	}
	tmpl, err := template.New("prompt").Funcs(funcs).Option("missingkey=error").Parse(cfg.Template)
	if err != nil {
		return nil, fmt.Errorf("parse prompt template: %w", err)
	}
	r := &Renderer{cfg: cfg, tmpl: tmpl, tokens: ApproxTokens}
	for _, o := range opts {
		o(r)
	}
	if cfg.Memories.Enabled && r.mems == nil {
		return nil, errNoMemorySource
	}
	// Execute once on a sample, so a template that refers to a field that
	// does not exist fails here rather than on the first training step.
	sample := PromptData{Instruction: "i", History: []Message{{"user", "u"}, {"assistant", "a"}}, Question: "q", ConvID: "c", Turn: 2,
		Memories: []PromptMemory{{ID: "m1", Text: "m", Score: 0.5}}}
	if err := tmpl.Execute(&bytes.Buffer{}, sample); err != nil {
		return nil, fmt.Errorf("prompt template: %w", err)
	}
	return r, nil
}

// Render is RenderContext without a context.
func (r *Renderer) Render(t Turn) (Prompt, error) { return r.RenderContext(context.Background(), t) }

// RenderContext renders one turn, with its memories when
// memories.enabled. A turn without a question cannot be rendered.
func (r *Renderer) RenderContext(ctx context.Context, t Turn) (Prompt, error) {
	q := strings.TrimSpace(t.Question)
	if q == "" {
		return Prompt{}, fmt.Errorf("render %s: the turn has no question", t.ID())
	}
	var mems []PromptMemory
	if r.cfg.Memories.Enabled {
		var err error
		if mems, err = r.mems(ctx, t); err != nil {
			return Prompt{}, fmt.Errorf("render %s: memories: %w", t.ID(), err)
		}
	}
	hist := r.Window(t.History)
	var buf bytes.Buffer
	if err := r.tmpl.Execute(&buf, PromptData{Instruction: r.cfg.Instruction, History: hist, Question: q, ConvID: t.ConvID, Turn: t.Turn, Memories: mems}); err != nil {
		return Prompt{}, fmt.Errorf("render %s: %w", t.ID(), err)
	}
	p := Prompt{System: r.cfg.System, User: strings.TrimSpace(buf.String()), History: hist, Question: q, Memories: mems}
	if p.System != "" {
		p.Messages = append(p.Messages, Message{Role: "system", Text: p.System})
		p.Text = p.System + "\n\n"
	}
	p.Messages = append(p.Messages, Message{Role: "user", Text: p.User})
	// The flat form keeps the template's trailing newline, so a completion
	// model continues on a fresh line after "Rewrite:".
	p.Text += strings.TrimLeft(buf.String(), "\n")
	return p, nil
}

// Window applies MaxTurns, IncludeAssistant, MaxMessageChars and the budgets
// to a history, newest messages kept first. The result is a new slice.
func (r *Renderer) Window(h []Message) []Message {
	start := 0
	if r.cfg.MaxTurns > 0 {
		users := 0
		for i := len(h) - 1; i >= 0; i-- {
			if h[i].Role == "user" {
				users++
				if users == r.cfg.MaxTurns {
					start = i
					break
				}
			}
		}
	}
	var out []Message
	for _, m := range h[start:] {
		if m.Role != "user" && !r.cfg.IncludeAssistant {
			continue
		}
		if r.cfg.MaxMessageChars > 0 {
			m.Text = truncateWords(m.Text, r.cfg.MaxMessageChars)
		}
		out = append(out, m)
	}
	// Drop the oldest messages until the window fits both budgets; the
	// newest message is cut rather than dropped, so some context remains.
	fits := func(ms []Message) bool {
		chars, toks := 0, 0
		for _, m := range ms {
			chars += utf8.RuneCountInString(m.Text)
			if r.cfg.MaxTokens > 0 {
				toks += r.tokens(m.Text)
			}
		}
		return (r.cfg.MaxChars == 0 || chars <= r.cfg.MaxChars) && (r.cfg.MaxTokens == 0 || toks <= r.cfg.MaxTokens)
	}
	for len(out) > 1 && !fits(out) {
		out = out[1:]
	}
	if len(out) == 1 && !fits(out) {
		m := out[0]
		if r.cfg.MaxChars > 0 {
			m.Text = truncateWords(m.Text, r.cfg.MaxChars)
		}
		for r.cfg.MaxTokens > 0 && m.Text != "" && r.tokens(m.Text) > r.cfg.MaxTokens {
			m.Text = truncateWords(m.Text, utf8.RuneCountInString(m.Text)*9/10)
		}
		out[0] = m
	}
	if len(out) == 0 {
		return nil
	}
	return append([]Message(nil), out...)
}

// truncateWords cuts s to at most n runes (the mark included), at the last
// space when there is one in the second half, and marks the cut with "…".
func truncateWords(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	if n == 1 {
		return "…"
	}
	runes := []rune(s)[:n-1]
	cut := string(runes)
	if i := strings.LastIndexFunc(cut, unicode.IsSpace); i > len(cut)/2 {
		cut = cut[:i]
	}
	return strings.TrimRightFunc(cut, unicode.IsSpace) + "…"
}

// ApproxTokens counts words and punctuation marks: each maximal run of
// letters and digits is one token, each other non-space rune is one token.
// Subword tokenizers give about 1.1–1.4 tokens per such unit on English.
func ApproxTokens(s string) int {
	n := 0
	inWord := false
	for _, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if !inWord {
				n++
				inWord = true
			}
		case unicode.IsSpace(r):
			inWord = false
		default:
			n++
			inWord = false
		}
	}
	return n
}
