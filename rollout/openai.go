package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/himes-rl/himes/internal/ollama"

	"github.com/himes-rl/himes/internal/httpcall"

	"github.com/himes-rl/himes/retrieval"
)

// OpenAI answers through an OpenAI-compatible /chat/completions endpoint
// (vLLM, SGLang, llama.cpp server, Ollama's /v1), for users who serve the
// frozen model there. Routing, timeouts and retries are those of Ollama.
type OpenAI struct {
	cfg    OpenAIConfig
	prompt *promptTemplate
	call   *httpcall.Caller
	header http.Header
}

// NewOpenAI builds the responder without contacting the endpoints.
func NewOpenAI(cfg OpenAIConfig, p PromptConfig) (*OpenAI, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("openai responder: %w", err)
	}
	pt, err := newPromptTemplate(p)
	if err != nil {
		return nil, fmt.Errorf("openai responder: %w", err)
	}
	bases := make([]*url.URL, len(cfg.BaseURLs))
	limits := make([]int, len(cfg.BaseURLs))
	for i, b := range cfg.BaseURLs {
		if bases[i], err = httpcall.ParseHost(b); err != nil {
			return nil, fmt.Errorf("openai responder: %w", err)
		}
		limits[i] = cfg.MaxPerHost
	}
	o := &OpenAI{cfg: cfg, prompt: pt, header: http.Header{}}
	if cfg.APIKeyEnv != "" {
		key := os.Getenv(cfg.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("openai responder: environment variable %s (api_key_env) is empty", cfg.APIKeyEnv)
		}
		o.header.Set("Authorization", "Bearer "+key)
	}
	o.call = httpcall.NewCaller("openai", httpcall.NewPool(bases, limits), cfg.Call.Policy(), uint64(cfg.Seed))
	return o, nil
}

// Name is the model identity for the answer cache.
func (o *OpenAI) Name() string {
	return fmt.Sprintf("openai/%s(temperature=%g,seed=%d,max_tokens=%d)", o.cfg.Model, o.cfg.Temperature, o.cfg.Seed, o.cfg.MaxTokens)
}

// Close releases idle connections.
func (o *OpenAI) Close() { o.call.Close() }

// Deterministic reports whether answers are reproducible (temperature 0).
func (o *OpenAI) Deterministic() bool { return o.cfg.Temperature == 0 }

// Capacity is the total number of concurrent requests the endpoints accept.
func (o *OpenAI) Capacity() int { return o.call.Pool().Capacity() }

// Check lists /models on every endpoint and fails when the model is absent.
func (o *OpenAI) Check(ctx context.Context) error {
	for _, h := range o.call.Pool().Hosts() {
		var models struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		hint := "serve " + o.cfg.Model + " on that endpoint"
		err := o.call.Call(ctx, h, o.cfg.Model, hint, func(ctx context.Context, h *httpcall.Host) (int, error) {
			return o.call.DoJSON(ctx, h, http.MethodGet, "/models", nil, &models, o.header)
		})
		if err != nil {
			return fmt.Errorf("openai endpoint %s: %w", h, err)
		}
		found := false
		for _, m := range models.Data {
			// Ollama's /v1 lists "name:latest" for "name".
			found = found || m.ID == o.cfg.Model || ollama.SameModel(m.ID, o.cfg.Model)
		}
		if !found {
			return &ModelNotFoundError{Model: o.cfg.Model, Host: h.String(), Hint: hint}
		}
	}
	return nil
}

// RenderPrompt returns the exact conversation sent; the answer-cache key.
func (o *OpenAI) RenderPrompt(question string, chunks []retrieval.Ranked) (string, error) {
	return o.prompt.cacheText(question, chunks)
}

type openAIMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Respond sends one non-streaming chat completion.
func (o *OpenAI) Respond(ctx context.Context, question string, chunks []retrieval.Ranked) (string, error) {
	user, err := o.prompt.render(question, chunks)
	if err != nil {
		return "", err
	}
	var msgs []openAIMessage
	if o.prompt.system != "" {
		msgs = append(msgs, openAIMessage{"system", o.prompt.system})
	}
	msgs = append(msgs, openAIMessage{"user", user})
	body, err := json.Marshal(map[string]any{
		"model": o.cfg.Model, "messages": msgs, "stream": false,
		"temperature": o.cfg.Temperature, "seed": o.cfg.Seed, "max_tokens": o.cfg.MaxTokens,
	})
	if err != nil {
		return "", fmt.Errorf("encode chat request: %w", err)
	}
	var out struct {
		Choices []struct {
			Message openAIMessage `json:"message"`
		} `json:"choices"`
	}
	err = o.call.Call(ctx, nil, o.cfg.Model, "serve "+o.cfg.Model+" on that endpoint", func(ctx context.Context, h *httpcall.Host) (int, error) {
		status, err := o.call.PostJSON(ctx, h, "/chat/completions", body, &out, o.header)
		if err == nil && len(out.Choices) == 0 {
			return status, &httpcall.MalformedError{What: "/chat/completions response has no choices"}
		}
		return status, err
	})
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out.Choices[0].Message.Content), nil
}
