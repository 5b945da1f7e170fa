package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/envconfig"

	"github.com/himes-rl/himes/retrieval"
)

// Ollama answers with a frozen model served by one or more Ollama servers.
type Ollama struct {
	cfg       OllamaConfig
	prompt    *promptTemplate
	call      *caller
	keepAlive *api.Duration
	options   map[string]any
	digest    string // set by Check; part of Name so a re-pulled model is a new cache key
}

// ollamaChatRequest adds "think" to the v0.6.5 request type, which predates
// it. It is always sent: newer servers would otherwise let thinking models
// spend the whole num_predict budget on reasoning.
type ollamaChatRequest struct {
	api.ChatRequest
	Think bool `json:"think"`
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
	hosts := cfg.Hosts
	if len(hosts) == 0 {
		// OLLAMA_HOST, with Ollama's own defaults (scheme, port 11434).
		hosts = []string{envconfig.Host().String()}
	}
	bases := make([]*url.URL, 0, len(hosts))
	limits := make([]int, len(hosts))
	for i, h := range hosts {
		u, err := parseHost(h)
		if err != nil {
			return nil, fmt.Errorf("ollama responder: %w", err)
		}
		if u.Port() == "" && u.Scheme == "http" {
			u.Host += ":11434"
		}
		bases = append(bases, u)
		limits[i] = cfg.MaxPerHost
		if len(cfg.HostLimits) == len(hosts) {
			limits[i] = cfg.HostLimits[i]
		}
	}
	o := &Ollama{cfg: cfg, prompt: pt}
	o.call = newCaller("ollama", newHostPool(bases, limits), cfg.Call, uint64(cfg.Seed))
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
func (o *Ollama) Capacity() int { return o.call.pool.capacity() }

// Close releases idle connections.
func (o *Ollama) Close() { o.call.close() }

// Check verifies, with one cheap call per host, that every host serves the
// model. A missing model is a *ModelNotFoundError naming the host and the fix.
func (o *Ollama) Check(ctx context.Context) error {
	for _, h := range o.call.pool.hosts {
		var lr api.ListResponse
		err := o.call.call(ctx, h, o.cfg.Model, "ollama pull "+o.cfg.Model, func(ctx context.Context, h *host) (int, error) {
			return o.call.doJSON(ctx, h, http.MethodGet, "/api/tags", nil, &lr, nil)
		})
		if err != nil {
			var nf *ModelNotFoundError
			if errors.As(err, &nf) {
				return err
			}
			return fmt.Errorf("ollama host %s unreachable (is `ollama serve` running there?): %w", h, err)
		}
		digest := ""
		for _, m := range lr.Models {
			if sameModel(m.Name, o.cfg.Model) || sameModel(m.Model, o.cfg.Model) {
				digest = m.Digest
				break
			}
		}
		if digest == "" {
			return &ModelNotFoundError{Model: o.cfg.Model, Host: h.String(), Hint: "ollama pull " + o.cfg.Model}
		}
		if o.digest != "" && o.digest != digest {
			return fmt.Errorf("ollama model %s differs between hosts (digest %.12s on %s, %.12s elsewhere): answers would depend on routing",
				o.cfg.Model, digest, h, o.digest)
		}
		o.digest = digest
	}
	return nil
}

// sameModel compares model names the way Ollama resolves them: a name
// without a tag means ":latest".
func sameModel(a, b string) bool {
	norm := func(s string) string {
		if !strings.Contains(s[strings.LastIndex(s, "/")+1:], ":") {
			return s + ":latest"
		}
		return s
	}
	return a != "" && b != "" && norm(a) == norm(b)
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
	stream := false
	body, err := json.Marshal(ollamaChatRequest{
		ChatRequest: api.ChatRequest{Model: o.cfg.Model, Messages: msgs, Stream: &stream,
			KeepAlive: o.keepAlive, Options: o.options},
		Think: false,
	})
	if err != nil {
		return "", fmt.Errorf("encode chat request: %w", err)
	}
	var out api.ChatResponse
	err = o.call.call(ctx, nil, o.cfg.Model, "ollama pull "+o.cfg.Model, func(ctx context.Context, h *host) (int, error) {
		return o.call.postJSON(ctx, h, "/api/chat", body, &out, nil)
	})
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out.Message.Content), nil
}

// Embed returns one embedding per input through /api/embed, with the same
// routing, timeout and retries as chat.
func (o *Ollama) Embed(ctx context.Context, inputs []string) ([][]float32, error) {
	opts := map[string]any{"num_ctx": o.cfg.NumCtx}
	if o.cfg.NumThread > 0 {
		opts["num_thread"] = o.cfg.NumThread
	}
	body, err := json.Marshal(api.EmbedRequest{Model: o.cfg.Model, Input: inputs, KeepAlive: o.keepAlive, Options: opts})
	if err != nil {
		return nil, fmt.Errorf("encode embed request: %w", err)
	}
	var out api.EmbedResponse
	err = o.call.call(ctx, nil, o.cfg.Model, "ollama pull "+o.cfg.Model, func(ctx context.Context, h *host) (int, error) {
		return o.call.postJSON(ctx, h, "/api/embed", body, &out, nil)
	})
	if err != nil {
		return nil, err
	}
	if len(out.Embeddings) != len(inputs) {
		return nil, fmt.Errorf("ollama embed: got %d embeddings for %d inputs", len(out.Embeddings), len(inputs))
	}
	return out.Embeddings, nil
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
