package rollout

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/himes-rl/himes/internal/ollama"

	"github.com/ollama/ollama/api"

	"github.com/himes-rl/himes/retrieval"
)

// Ollama answers with a frozen model served by one or more Ollama servers.
type Ollama struct {
	cfg       OllamaConfig
	prompt    *promptTemplate
	client    *ollama.Client
	keepAlive *api.Duration
	options   map[string]any
	digest    string // set by Check; part of Name so a re-pulled model is a new cache key
}

// NewOllama builds the Ollama responder without contacting the hosts (call
// Check, or use NewResponder which does).
func NewOllama(cfg OllamaConfig, p PromptConfig) (*Ollama, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("ollama responder: %w", err)
	}
	pt, err := newPromptTemplate(p)
	if err != nil {
		return nil, fmt.Errorf("ollama responder: %w", err)
	}
	client, err := ollama.New(cfg.Hosts, cfg.MaxPerHost, cfg.HostLimits, cfg.Call.Policy(), uint64(cfg.Seed))
	if err != nil {
		return nil, fmt.Errorf("ollama responder: %w", err)
	}
	o := &Ollama{cfg: cfg, prompt: pt, client: client}
	if cfg.KeepAlive != "" {
		d, err := parseKeepAlive(cfg.KeepAlive)
		if err != nil {
			return nil, fmt.Errorf("ollama responder: keep_alive: %w", err)
		}
		o.keepAlive = &api.Duration{Duration: d}
	}
	// Options are fixed for the run: changing runner options such as num_ctx
	// between requests makes Ollama reload the model.
	o.options = map[string]any{
		"temperature": cfg.Temperature,
		"seed":        cfg.Seed,
		"num_predict": cfg.NumPredict,
		"num_ctx":     cfg.NumCtx,
	}
	if cfg.NumThread > 0 {
		o.options["num_thread"] = cfg.NumThread
	}
	return o, nil
}

// Name is the model identity for the answer cache: model, digest when known,
// and the sampling options that change answers.
func (o *Ollama) Name() string {
	d := o.digest
	if len(d) > 12 {
		d = d[:12]
	}
	return fmt.Sprintf("ollama/%s@%s(temperature=%g,seed=%d,num_predict=%d,num_ctx=%d)",
		o.cfg.Model, d, o.cfg.Temperature, o.cfg.Seed, o.cfg.NumPredict, o.cfg.NumCtx)
}

// Deterministic reports whether answers are reproducible (temperature 0),
// which makes them cacheable.
func (o *Ollama) Deterministic() bool { return o.cfg.Temperature == 0 }

// Capacity is the total number of concurrent requests the hosts accept.
func (o *Ollama) Capacity() int { return o.client.Capacity() }

// Close releases idle connections.
func (o *Ollama) Close() { o.client.Close() }

// Check verifies, with one cheap call per host, that every host serves the
// model. A missing model is a *ModelNotFoundError naming the host and the fix.
func (o *Ollama) Check(ctx context.Context) error {
	d, err := o.client.Check(ctx, o.cfg.Model)
	if err != nil {
		return err
	}
	o.digest = d
	return nil
}

// RenderPrompt returns the exact conversation sent for (question, chunks);
// the runner keys the answer cache by it.
func (o *Ollama) RenderPrompt(question string, chunks []retrieval.Ranked) (string, error) {
	return o.prompt.cacheText(question, chunks)
}

// Respond sends one non-streaming chat request and returns the answer text.
func (o *Ollama) Respond(ctx context.Context, question string, chunks []retrieval.Ranked) (string, error) {
	user, err := o.prompt.render(question, chunks)
	if err != nil {
		return "", err
	}
	var msgs []api.Message
	if o.prompt.system != "" {
		msgs = append(msgs, api.Message{Role: "system", Content: o.prompt.system})
	}
	msgs = append(msgs, api.Message{Role: "user", Content: user})
	answer, err := o.client.Chat(ctx, ollama.ChatRequest{
		ChatRequest: api.ChatRequest{Model: o.cfg.Model, Messages: msgs, KeepAlive: o.keepAlive, Options: o.options},
		Think:       false,
	})
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(answer), nil
}

// Embed returns one embedding per input through /api/embed, with the same
// routing, timeout and retries as chat.
func (o *Ollama) Embed(ctx context.Context, inputs []string) ([][]float32, error) {
	opts := map[string]any{"num_ctx": o.cfg.NumCtx}
	if o.cfg.NumThread > 0 {
		opts["num_thread"] = o.cfg.NumThread
	}
	return o.client.Embed(ctx, api.EmbedRequest{Model: o.cfg.Model, Input: inputs, KeepAlive: o.keepAlive, Options: opts})
}

// parseKeepAlive accepts a Go duration ("30m") or whole seconds ("300");
// negative keeps the model loaded indefinitely, as in Ollama.
func parseKeepAlive(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither a duration (30m) nor seconds (300)", s)
	}
	return time.Duration(n) * time.Second, nil
}
