package trainer

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/himes-rl/himes/internal/httpcall"
)

// Client speaks the protocol to a remote endpoint. It implements Policy,
// Scorer and Deleter (whether the endpoint serves /v1/delete is in its
// Info().Capabilities.Delete). Every call is retried on connection failures, timeouts and
// retryable errors: reads are side-effect free, and mutating calls carry a
// step_id (generated when the caller leaves it empty, then reused on every
// retry), so a retry never applies an update twice.
type Client struct {
	base       string
	token      string
	hc         *http.Client
	timeout    time.Duration
	retries    int
	backoff    time.Duration
	maxBackoff time.Duration
	// reconnect: how long a call waits out refused connections (reconnect.go).
	reconnect time.Duration
	log       *slog.Logger
	// lossChecked: the endpoint's info advertised the optional loss
	// settings (dual clip, KL estimator) a grpo_step asked for.
	lossChecked sync.Map // string (the settings) → true
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithHTTPClient sets the HTTP client (default: a fresh one with the default transport).
func WithHTTPClient(hc *http.Client) ClientOption { return func(c *Client) { c.hc = hc } }

// WithTimeout bounds each attempt (default 10 minutes).
func WithTimeout(d time.Duration) ClientOption { return func(c *Client) { c.timeout = d } }

// WithRetries sets how many times a call is retried after the first attempt (default 4).
func WithRetries(n int) ClientOption { return func(c *Client) { c.retries = max(n, 0) } }

// WithBackoff sets the first retry delay and its cap; delays double, with
// jitter (defaults 250ms, 10s).
func WithBackoff(initial, maxDelay time.Duration) ClientOption {
	return func(c *Client) { c.backoff, c.maxBackoff = initial, maxDelay }
}

// WithLogger sets the logger for retries (default slog.Default()).
func WithLogger(l *slog.Logger) ClientOption { return func(c *Client) { c.log = l } }

// NewClient returns a client of the endpoint at baseURL (e.g.
// "http://127.0.0.1:8765"); token, when non-empty, is sent as a bearer token.
func NewClient(baseURL, token string, opts ...ClientOption) *Client {
	base, err := parseBaseURL(baseURL)
	if err != nil {
		base = baseURL // calls will fail with a clear error naming it
	}
	c := &Client{
		base: base, token: token, hc: &http.Client{},
		timeout: 10 * time.Minute, retries: 4,
		backoff: 250 * time.Millisecond, maxBackoff: 10 * time.Second,
	}
	for _, o := range opts {
		o(c)
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c
}

// URL is the endpoint's base URL.
func (c *Client) URL() string { return c.base }

// Info implements Policy.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var out Info
	err := c.call(ctx, http.MethodGet, "/v1/info", "info", nil, &out)
	return out, err
}

// Sample implements Policy.
func (c *Client) Sample(ctx context.Context, req SampleRequest) (SampleResponse, error) {
	var out SampleResponse
	err := c.call(ctx, http.MethodPost, "/v1/sample", "sample", req, &out)
	return out, err
}

// Logprobs implements Scorer.
func (c *Client) Logprobs(ctx context.Context, req LogprobsRequest) (LogprobsResponse, error) {
	var out LogprobsResponse
	err := c.call(ctx, http.MethodPost, "/v1/logprobs", "logprobs", req, &out)
	return out, err
}

// SFTStep implements Policy.
func (c *Client) SFTStep(ctx context.Context, req SFTRequest) (SFTResponse, error) {
	if req.StepID == "" {
		req.StepID = newStepID()
	}
	var out SFTResponse
	err := c.call(ctx, http.MethodPost, "/v1/sft_step", "sft_step", req, &out)
	return out, err
}

// GRPOStep implements Policy.
func (c *Client) GRPOStep(ctx context.Context, req GRPORequest) (GRPOResponse, error) {
	if req.StepID == "" {
		req.StepID = newStepID()
	}
	// Every loss field goes on the wire with its value, so the endpoint
	// applies exactly the loss resolved here (PROTOCOL.md, "LossConfig").
	loss, err := req.Loss.Resolve()
	if err != nil {
		return GRPOResponse{}, fmt.Errorf("trainer at %s: grpo_step: %w", c.base, err)
	}
	req.Loss = LossConfigOf(loss)
	if err := c.checkLossOptions(ctx, loss, req.ResetOptimizer); err != nil {
		return GRPOResponse{}, err
	}
	var out GRPOResponse
	err = c.call(ctx, http.MethodPost, "/v1/grpo_step", "grpo_step", req, &out)
	return out, err
}

// checkLossOptions refuses optional loss settings the endpoint does not
// advertise: an endpoint that predates them would ignore the fields and
// train with another loss than the one asked for.
func (c *Client) checkLossOptions(ctx context.Context, lc ResolvedLoss, reset bool) error {
	dual := lc.ClipRatioC != 0
	kl := lc.KLEstimator != KLK3
	if !dual && !kl && !reset {
		return nil
	}
	key := fmt.Sprint(dual, lc.KLEstimator, reset)
	if _, ok := c.lossChecked.Load(key); ok {
		return nil
	}
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("grpo_step: checking the endpoint's loss options: %w", err)
	}
	if dual && !info.Capabilities.DualClip {
		return fmt.Errorf("grpo_step: loss.clip_ratio_c = %v, but the endpoint at %s (%s) does not advertise capabilities.dual_clip", lc.ClipRatioC, c.base, info.Implementation)
	}
	if reset && !info.Capabilities.OptimizerReset {
		return fmt.Errorf("grpo_step: reset_optimizer (grpo.optimizer.reset), but the endpoint at %s (%s) does not advertise capabilities.optimizer_reset", c.base, info.Implementation)
	}
	if kl && !slices.Contains(info.KLEstimators, lc.KLEstimator) {
		offered := info.KLEstimators
		if len(offered) == 0 {
			offered = []string{KLK3} // an endpoint that predates kl_estimators
		}
		return fmt.Errorf("grpo_step: loss.kl_estimator = %q, but the endpoint at %s (%s) offers only %v", lc.KLEstimator, c.base, info.Implementation, offered)
	}
	c.lossChecked.Store(key, true)
	return nil
}

// Save implements Policy.
func (c *Client) Save(ctx context.Context, req SaveRequest) (SaveResponse, error) {
	if req.StepID == "" {
		req.StepID = newStepID()
	}
	var out SaveResponse
	err := c.call(ctx, http.MethodPost, "/v1/save", "save", req, &out)
	return out, err
}

// Load implements Policy.
func (c *Client) Load(ctx context.Context, req LoadRequest) (LoadResponse, error) {
	if req.StepID == "" {
		req.StepID = newStepID()
	}
	var out LoadResponse
	err := c.call(ctx, http.MethodPost, "/v1/load", "load", req, &out)
	return out, err
}

// Delete implements Deleter. An endpoint that predates /v1/delete answers
// not_found (404) for the path; check Info().Capabilities.Delete first.
func (c *Client) Delete(ctx context.Context, req DeleteRequest) (DeleteResponse, error) {
	if req.StepID == "" {
		req.StepID = newStepID()
	}
	var out DeleteResponse
	err := c.call(ctx, http.MethodPost, "/v1/delete", "delete", req, &out)
	if ErrorCode(err) == CodeNotFound {
		// Deleting a missing checkpoint is not an error, so not_found here
		// means the path itself is unknown.
		err = fmt.Errorf("%w (the endpoint does not serve /v1/delete; check info.capabilities.delete)", err)
	}
	return out, err
}

// Checkpoints implements Policy.
func (c *Client) Checkpoints(ctx context.Context) ([]CheckpointInfo, error) {
	var out struct {
		Checkpoints []CheckpointInfo `json:"checkpoints"`
	}
	err := c.call(ctx, http.MethodGet, "/v1/checkpoints", "checkpoints", nil, &out)
	return out.Checkpoints, err
}

// newStepID is a random step_id for callers that do not choose their own.
func newStepID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return "auto-" + hex.EncodeToString(b[:])
}

// call sends one request, retrying what is safe to retry.
func (c *Client) call(ctx context.Context, method, path, op string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("trainer at %s: encode %s request: %w", c.base, op, err)
		}
	}
	wait := httpcall.NewBackoff(c.backoff, c.maxBackoff, 1)
	err := httpcall.Retry(ctx, c.retries, wait, func(int) (bool, error) {
		return c.attemptReconnecting(ctx, method, path, op, body, out)
	}, func(n int, delay time.Duration, err error) {
		c.log.Warn("trainer call failed, retrying", "endpoint", c.base, "call", op,
			"attempt", n, "delay_s", delay.Seconds(), "err", err)
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("trainer at %s: %s: %w", c.base, op, err)
	}
	return err
}

// attempt makes one HTTP request; retry says whether a failure may be retried.
func (c *Client) attempt(ctx context.Context, method, path, op string, body []byte, out any) (retry bool, err error) {
	actx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, method, c.base+path, rd)
	if err != nil {
		return false, fmt.Errorf("trainer at %s: %s: %w", c.base, op, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// Connection refused/reset, EOF before a response, or a timeout;
		// the caller's own cancellation is not worth retrying.
		return ctx.Err() == nil, fmt.Errorf("trainer at %s: %s: %w", c.base, op, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return ctx.Err() == nil, fmt.Errorf("trainer at %s: %s: read response: %w", c.base, op, err)
	}
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(raw, out); err != nil {
			return false, fmt.Errorf("trainer at %s: %s: decode response: %w", c.base, op, err)
		}
		return false, nil
	}
	var env struct {
		Error *Error `json:"error"`
	}
	if json.Unmarshal(raw, &env) == nil && env.Error != nil && env.Error.Code != "" {
		env.Error.Status = resp.StatusCode
		return env.Error.Retryable, fmt.Errorf("trainer at %s refused %s: %w", c.base, op, env.Error)
	}
	// Not a protocol error body: a proxy or a crashed server.
	retryable := resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable ||
		resp.StatusCode == http.StatusGatewayTimeout
	return retryable, fmt.Errorf("trainer at %s: %s: HTTP %d: %s", c.base, op, resp.StatusCode, snippet(raw))
}

func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// ErrorCode returns the protocol error code carried by err ("" if none).
func ErrorCode(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
