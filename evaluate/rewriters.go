package evaluate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/himes-rl/himes/internal/httpcall"
	"github.com/himes-rl/himes/internal/ollama"

	"github.com/ollama/ollama/api"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/trainer"
)

// Rewriter turns a turn (dialogue + question) into the query retrieval sees.
type Rewriter interface {
	Name() string
	Rewrite(ctx context.Context, t datasets.Turn) (string, error)
}

// ErrNoGoldRewrite marks a turn without a human rewrite under the gold rewriter.
var ErrNoGoldRewrite = errors.New("turn has no human rewrite")

// Raw uses the question as is: the baseline every system is compared with.
type Raw struct{}

// Name is "raw".
func (Raw) Name() string { return "raw" }

// Rewrite returns the question.
func (Raw) Rewrite(_ context.Context, t datasets.Turn) (string, error) { return t.Question, nil }

// Concat prepends the user side of the history to the question. Assistant
// turns are left out: in CAsT they are whole passages that would swamp the
// query (the data README's "question + all earlier user turns" row).
type Concat struct{}

// Name is "concat".
func (Concat) Name() string { return "concat" }

// Rewrite joins the earlier user utterances and the question with spaces.
func (Concat) Rewrite(_ context.Context, t datasets.Turn) (string, error) {
	parts := make([]string, 0, len(t.History)+1)
	for _, m := range t.History {
		if m.Role == "user" {
			parts = append(parts, m.Text)
		}
	}
	return strings.Join(append(parts, t.Question), " "), nil
}

// Gold uses the human rewrite: an oracle upper bound for a rewriter.
type Gold struct{}

// Name is "gold".
func (Gold) Name() string { return "gold" }

// Rewrite returns the human rewrite, or ErrNoGoldRewrite.
func (Gold) Rewrite(_ context.Context, t datasets.Turn) (string, error) {
	if t.Rewrite == nil {
		return "", ErrNoGoldRewrite
	}
	return *t.Rewrite, nil
}

// PromptFunc renders the rewriter prompt of a turn, as training renders it
// (with the same memories when data.prompt.memories is on).
type PromptFunc func(context.Context, datasets.Turn) (trainer.Prompt, error)

// Policy rewrites greedily (temperature 0) with a trainer endpoint's policy,
// from the same prompt training samples from.
type Policy struct {
	Label     string // "policy" unless set
	Policy    trainer.Policy
	Render    PromptFunc
	MaxTokens int
	Seed      int64
}

// UntrainedPolicy labels a Policy that has had no update (policy_version
// 0), so that its rows never pass for a trained policy's; FileSafe makes
// its TREC run policy_untrained.
const UntrainedPolicy = "policy (untrained)"

// Name is the label, "policy" by default.
func (p Policy) Name() string {
	if p.Label != "" {
		return p.Label
	}
	return "policy"
}

// Rewrite samples one greedy completion.
func (p Policy) Rewrite(ctx context.Context, t datasets.Turn) (string, error) {
	prompt, err := p.Render(ctx, t)
	if err != nil {
		return "", fmt.Errorf("render prompt: %w", err)
	}
	if prompt.ID == "" {
		prompt.ID = t.ID()
	}
	resp, err := p.Policy.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{prompt}, N: 1,
		Temperature: 0, MaxTokens: p.MaxTokens, Seed: p.Seed})
	if err != nil {
		return "", fmt.Errorf("policy sample: %w", err)
	}
	if len(resp.Samples) != 1 {
		return "", fmt.Errorf("policy sample: got %d samples, want 1", len(resp.Samples))
	}
	return strings.TrimSpace(resp.Samples[0].Text), nil
}

// Ollama rewrites with a chat model served by Ollama, greedily, from the
// rendered prompt's messages (or its text when it has none).
type Ollama struct {
	Model  string
	client *ollama.Client
	Render PromptFunc
	Seed   int
	// MaxTokens caps the rewrite (Ollama's num_predict; 0: the server's
	// default, which lets a model that never stops fill its context).
	MaxTokens int
}

// NewOllama connects to host ("" = OLLAMA_HOST or the local default); calls
// have policy's timeout and retries (himes eval passes rollout.ollama's, so
// --set rollout.ollama.timeout=5m gives a slow CPU model more time).
func NewOllama(model, host string, render PromptFunc, policy httpcall.Policy) (*Ollama, error) {
	if model == "" {
		return nil, errors.New("ollama rewriter: empty model name (want ollama:<model>)")
	}
	var hosts []string
	if host != "" {
		hosts = []string{host}
	}
	c, err := ollama.New(hosts, 4, nil, policy, 1)
	if err != nil {
		return nil, fmt.Errorf("ollama rewriter: %w", err)
	}
	return &Ollama{Model: model, client: c, Render: render}, nil
}

// Name is "ollama:<model>".
func (o *Ollama) Name() string { return "ollama:" + o.Model }

// Check says whether the host serves the model ("ollama pull" it first).
func (o *Ollama) Check(ctx context.Context) error {
	_, err := o.client.Check(ctx, o.Model)
	return err
}

// Close releases idle connections.
func (o *Ollama) Close() { o.client.Close() }

// Rewrite asks the model for the rewrite at temperature 0.
func (o *Ollama) Rewrite(ctx context.Context, t datasets.Turn) (string, error) {
	p, err := o.Render(ctx, t)
	if err != nil {
		return "", fmt.Errorf("render prompt: %w", err)
	}
	var msgs []api.Message
	for _, m := range p.Messages {
		msgs = append(msgs, api.Message{Role: m.Role, Content: m.Content})
	}
	if len(msgs) == 0 {
		msgs = []api.Message{{Role: "user", Content: p.Text}}
	}
	opts := map[string]any{"temperature": 0, "seed": o.Seed}
	if o.MaxTokens > 0 {
		opts["num_predict"] = o.MaxTokens
	}
	out, err := o.client.Chat(ctx, ollama.ChatRequest{ChatRequest: api.ChatRequest{Model: o.Model, Messages: msgs, Options: opts}})
	if err != nil {
		return "", fmt.Errorf("ollama %s: %w", o.Model, err)
	}
	return strings.TrimSpace(out), nil
}
