// Package rollout fans a GRPO step's grouped rewrites out through retrieval,
// a frozen response model and the HSER reward, and records one rollout per
// sample. The responder is the bottleneck of a step, so the runner keeps it
// saturated (bounded concurrency per host), never calls it twice for the same
// work (per-step de-duplication and a cross-step answer cache), and never
// turns a failed call into a reward (failures are recorded, not scored).
package rollout

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/template"

	"github.com/himes-rl/himes/retrieval"
)

// Responder answers a question from retrieved chunks: one answer per
// (question, chunks).
type Responder interface {
	Name() string // model identity, part of the answer-cache key
	Respond(ctx context.Context, question string, chunks []retrieval.Ranked) (string, error)
}

// PromptRenderer is implemented by responders whose answer is a function of
// a rendered prompt; the runner keys the answer cache by that prompt, so two
// chunk lists that render identically share an answer.
type PromptRenderer interface {
	RenderPrompt(question string, chunks []retrieval.Ranked) (string, error)
}

// NewResponder builds the configured responder. For the network responders
// it checks that the model exists on every host before returning, so a typo
// fails the run at start-up, not after the first step.
func NewResponder(ctx context.Context, cfg Config) (Responder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rollout config: %w", err)
	}
	switch cfg.Responder {
	case "extractive":
		return NewExtractive(cfg.Extractive), nil
	case "ollama":
		o, err := NewOllama(cfg.Ollama, cfg.Prompt)
		if err != nil {
			return nil, err
		}
		if err := o.Check(ctx); err != nil {
			o.Close()
			return nil, err
		}
		return o, nil
	case "openai":
		o, err := NewOpenAI(cfg.OpenAI, cfg.Prompt)
		if err != nil {
			return nil, err
		}
		if err := o.Check(ctx); err != nil {
			o.Close()
			return nil, err
		}
		return o, nil
	}
	return nil, fmt.Errorf("rollout: unknown responder %q", cfg.Responder)
}

// promptTemplate renders the chat messages of the model responders.
type promptTemplate struct {
	system    string
	user      *template.Template
	maxChunks int
}

func newPromptTemplate(p PromptConfig) (*promptTemplate, error) {
	t, err := template.New("user").Option("missingkey=error").Parse(p.User)
	if err != nil {
		return nil, fmt.Errorf("user template: %w", err)
	}
	pt := &promptTemplate{system: p.System, user: t, maxChunks: p.MaxChunks}
	// Render once with sample data so a template naming an unknown field fails
	// at start-up rather than on every rollout.
	if _, err := pt.render("q", []retrieval.Ranked{{Chunk: retrieval.Chunk{ID: "c", Text: "t"}}}); err != nil {
		return nil, err
	}
	return pt, nil
}

type promptData struct {
	Question string
	Chunks   []retrieval.Ranked
	Context  string
}

// render returns the user message.
func (p *promptTemplate) render(question string, chunks []retrieval.Ranked) (string, error) {
	if p.maxChunks > 0 && len(chunks) > p.maxChunks {
		chunks = chunks[:p.maxChunks]
	}
	var ctxb strings.Builder
	for i, c := range chunks {
		ctxb.WriteString("[" + strconv.Itoa(i+1) + "] ")
		if c.Title != "" {
			ctxb.WriteString(c.Title + ": ")
		}
		ctxb.WriteString(strings.TrimSpace(c.Text))
		ctxb.WriteByte('\n')
	}
	var b bytes.Buffer
	if err := p.user.Execute(&b, promptData{Question: question, Chunks: chunks, Context: ctxb.String()}); err != nil {
		return "", fmt.Errorf("render user prompt: %w", err)
	}
	return b.String(), nil
}

// cacheText is the full rendered conversation, the answer-cache key's prompt part.
func (p *promptTemplate) cacheText(question string, chunks []retrieval.Ranked) (string, error) {
	u, err := p.render(question, chunks)
	if err != nil {
		return "", err
	}
	return "system:" + p.system + "\x00user:" + u, nil
}
