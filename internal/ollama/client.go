// Package ollama is himes's one client for Ollama servers: chat (the frozen
// responder, the Ollama rewriter, the topic classifier), embed (the Ollama
// embedder) and the model check, all through internal/httpcall, so every
// call has a timeout, retries with backoff, several hosts and least-loaded
// routing. A 200 response without the documented payload is an error
// (*httpcall.MalformedError), never an empty answer or vector.
package ollama

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/envconfig"

	"github.com/himes-rl/himes/internal/httpcall"
)

// DefaultPolicy is the timeout and retry policy of callers that have no
// config section of their own (embedder, classifier, rewriter).
var DefaultPolicy = httpcall.Policy{Timeout: 60 * time.Second, Retries: 4,
	BackoffBase: 200 * time.Millisecond, BackoffMax: 5 * time.Second}

// Client calls one or more Ollama hosts.
type Client struct {
	call *httpcall.Caller
}

// New builds a client for hosts ("host:port" or URLs; none = OLLAMA_HOST with
// Ollama's defaults). limits[i] bounds the concurrent calls to hosts[i]
// (nil: perHost each). seed only drives the backoff jitter.
func New(hosts []string, perHost int, limits []int, pol httpcall.Policy, seed uint64) (*Client, error) {
	if len(hosts) == 0 {
		hosts = []string{envconfig.Host().String()}
	}
	if perHost < 1 {
		perHost = 1
	}
	bases := make([]*url.URL, 0, len(hosts))
	lim := make([]int, len(hosts))
	for i, h := range hosts {
		u, err := httpcall.ParseHost(h)
		if err != nil {
			return nil, err
		}
		if u.Port() == "" && u.Scheme == "http" {
			u.Host += ":11434"
		}
		bases = append(bases, u)
		lim[i] = perHost
		if len(limits) == len(hosts) {
			lim[i] = limits[i]
		}
	}
	return &Client{call: httpcall.NewCaller("ollama", httpcall.NewPool(bases, lim), pol, seed)}, nil
}

// Capacity is the total number of concurrent calls the hosts accept.
func (c *Client) Capacity() int { return c.call.Pool().Capacity() }

// WrapTransport wraps the HTTP transport (a proxy, a fault injector in tests).
func (c *Client) WrapTransport(wrap func(http.RoundTripper) http.RoundTripper) {
	c.call.WrapTransport(wrap)
}

// Close releases idle connections.
func (c *Client) Close() { c.call.Close() }

// ChatRequest adds "think" to the v0.6.5 request type, which predates it. It
// is always sent: newer servers would otherwise let thinking models spend the
// whole num_predict budget on reasoning.
type ChatRequest struct {
	api.ChatRequest
	Think bool `json:"think"`
}

// chatResponse tells an absent message from an empty one.
type chatResponse struct {
	Message *api.Message `json:"message"`
}

// Chat sends one non-streaming chat request and returns the reply's content.
func (c *Client) Chat(ctx context.Context, req ChatRequest) (string, error) {
	stream := false
	req.Stream = &stream
	body, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("encode chat request: %w", err)
	}
	var out chatResponse
	err = c.call.Call(ctx, nil, req.Model, "ollama pull "+req.Model, func(ctx context.Context, h *httpcall.Host) (int, error) {
		out = chatResponse{}
		status, err := c.call.PostJSON(ctx, h, "/api/chat", body, &out, nil)
		if err == nil && out.Message == nil {
			return status, &httpcall.MalformedError{What: "/api/chat response has no message"}
		}
		return status, err
	})
	if err != nil {
		return "", err
	}
	return out.Message.Content, nil
}

// Embed returns one vector per input through /api/embed.
func (c *Client) Embed(ctx context.Context, req api.EmbedRequest) ([][]float32, error) {
	n := 0
	switch in := req.Input.(type) {
	case []string:
		n = len(in)
	case string:
		n = 1
	default:
		return nil, fmt.Errorf("ollama embed: input must be a string or []string, got %T", req.Input)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode embed request: %w", err)
	}
	var out api.EmbedResponse
	err = c.call.Call(ctx, nil, req.Model, "ollama pull "+req.Model, func(ctx context.Context, h *httpcall.Host) (int, error) {
		out = api.EmbedResponse{}
		status, err := c.call.PostJSON(ctx, h, "/api/embed", body, &out, nil)
		if err == nil && len(out.Embeddings) != n {
			return status, &httpcall.MalformedError{What: fmt.Sprintf("/api/embed returned %d embeddings for %d inputs", len(out.Embeddings), n)}
		}
		return status, err
	})
	if err != nil {
		return nil, err
	}
	for i, v := range out.Embeddings {
		if len(v) == 0 {
			return nil, &httpcall.MalformedError{What: fmt.Sprintf("/api/embed returned an empty embedding for input %d", i)}
		}
	}
	return out.Embeddings, nil
}

// Check verifies, with one cheap call per host, that every host serves model,
// and returns its digest. A missing model is a *httpcall.ModelNotFoundError
// naming the host and the fix; hosts serving different digests are an error
// (answers would depend on routing).
func (c *Client) Check(ctx context.Context, model string) (digest string, err error) {
	for _, h := range c.call.Pool().Hosts() {
		var lr api.ListResponse
		err := c.call.Call(ctx, h, model, "ollama pull "+model, func(ctx context.Context, h *httpcall.Host) (int, error) {
			return c.call.DoJSON(ctx, h, http.MethodGet, "/api/tags", nil, &lr, nil)
		})
		if err != nil {
			var nf *httpcall.ModelNotFoundError
			if errors.As(err, &nf) {
				return "", err
			}
			return "", fmt.Errorf("ollama host %s unreachable (is `ollama serve` running there?): %w", h, err)
		}
		d := ""
		for _, m := range lr.Models {
			if SameModel(m.Name, model) || SameModel(m.Model, model) {
				d = m.Digest
				break
			}
		}
		if d == "" {
			return "", &httpcall.ModelNotFoundError{Model: model, Host: h.String(), Hint: "ollama pull " + model}
		}
		if digest != "" && digest != d {
			return "", fmt.Errorf("ollama model %s differs between hosts (digest %.12s on %s, %.12s elsewhere): answers would depend on routing",
				model, d, h, digest)
		}
		digest = d
	}
	return digest, nil
}

// Show returns /api/show of model on one host (the first; the embedder
// uses one server): its capabilities, parameters and model info (verbose:
// with the tokenizer's vocabulary).
func (c *Client) Show(ctx context.Context, model string, verbose bool) (*api.ShowResponse, error) {
	body, err := json.Marshal(api.ShowRequest{Model: model, Verbose: verbose})
	if err != nil {
		return nil, fmt.Errorf("encode show request: %w", err)
	}
	var out api.ShowResponse
	err = c.call.Call(ctx, c.call.Pool().Hosts()[0], model, "ollama pull "+model, func(ctx context.Context, h *httpcall.Host) (int, error) {
		out = api.ShowResponse{}
		return c.call.PostJSON(ctx, h, "/api/show", body, &out, nil)
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// SameModel compares model names the way Ollama resolves them: a name
// without a tag means ":latest".
func SameModel(a, b string) bool {
	norm := func(s string) string {
		if !strings.Contains(s[strings.LastIndex(s, "/")+1:], ":") {
			return s + ":latest"
		}
		return s
	}
	return a != "" && b != "" && norm(a) == norm(b)
}
