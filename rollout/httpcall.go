package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ollama/ollama/api"
)

// host is one server of a responder with its own concurrency limit.
type host struct {
	base     *url.URL
	limit    int
	inflight int // guarded by hostPool.mu
}

func (h *host) String() string { return h.base.String() }

// hostPool routes each call to the least-loaded host with a free slot
// (load = in-flight / limit; ties go to the earlier host) and makes callers
// wait, cancellably, while every host is full.
type hostPool struct {
	mu    sync.Mutex
	hosts []*host
	wake  chan struct{} // closed and replaced whenever a slot frees
}

func newHostPool(bases []*url.URL, limits []int) *hostPool {
	p := &hostPool{wake: make(chan struct{})}
	for i, b := range bases {
		p.hosts = append(p.hosts, &host{base: b, limit: limits[i]})
	}
	return p
}

func (p *hostPool) capacity() int {
	n := 0
	for _, h := range p.hosts {
		n += h.limit
	}
	return n
}

// acquire takes a slot on the least-loaded host. avoid (the host that just
// failed) is only chosen when no other host has a free slot.
func (p *hostPool) acquire(ctx context.Context, avoid *host) (*host, error) {
	for {
		p.mu.Lock()
		var best *host
		for _, h := range p.hosts {
			if h.inflight >= h.limit {
				continue
			}
			if best == nil || (best == avoid && h != avoid) ||
				(h != avoid && h.inflight*best.limit < best.inflight*h.limit) {
				best = h
			}
		}
		if best != nil {
			best.inflight++
			p.mu.Unlock()
			return best, nil
		}
		wake := p.wake
		p.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (p *hostPool) release(h *host) {
	p.mu.Lock()
	h.inflight--
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
}

// caller runs HTTP calls against a host pool with a per-call timeout and
// retries with exponential backoff and jitter.
type caller struct {
	pool   *hostPool
	cfg    CallConfig
	client *http.Client
	log    *slog.Logger
	what   string // "ollama" or "openai", for messages

	rmu sync.Mutex
	rng *rand.Rand // jitter only; never affects results
}

// newHTTPClient returns a client sized for the pool: the default transport
// keeps only 2 idle connections per host, so a burst of N concurrent calls
// would open and tear down connections on every call.
func newHTTPClient(perHost, total int, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          max(total, 16),
		MaxIdleConnsPerHost:   max(perHost, 2),
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	// The per-call context deadline is the real limit; this is a backstop
	// for code paths that forget a context.
	return &http.Client{Transport: tr, Timeout: timeout + 5*time.Second}
}

func newCaller(what string, pool *hostPool, cfg CallConfig, seed uint64) *caller {
	perHost := 0
	for _, h := range pool.hosts {
		perHost = max(perHost, h.limit)
	}
	return &caller{
		pool: pool, cfg: cfg, what: what,
		client: newHTTPClient(perHost, pool.capacity(), cfg.Timeout),
		log:    slog.Default().With("component", "rollout", "responder", what),
		rng:    rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
	}
}

func (c *caller) close() { c.client.CloseIdleConnections() }

// backoff returns the wait before retry number attempt (1-based): an
// exponential ceiling with "equal jitter" (half fixed, half random), so a
// burst of rejected calls spreads out instead of returning in lock-step.
func (c *caller) backoff(attempt int) time.Duration {
	d := c.cfg.BackoffBase << min(attempt-1, 30)
	if d <= 0 || d > c.cfg.BackoffMax {
		d = c.cfg.BackoffMax
	}
	c.rmu.Lock()
	j := time.Duration(c.rng.Int64N(int64(d)/2 + 1))
	c.rmu.Unlock()
	return d/2 + j
}

// attemptFunc performs one attempt against h within ctx (which carries the
// per-call deadline). It returns the HTTP status (0 when there was no response).
type attemptFunc func(ctx context.Context, h *host) (status int, err error)

// call runs fn on the least-loaded host (or on pin when set, without taking a
// slot), retrying retryable failures. A 404 becomes a *ModelNotFoundError;
// other final failures a *CallError. Cancellation of ctx returns ctx.Err().
func (c *caller) call(ctx context.Context, pin *host, model, hint string, fn attemptFunc) error {
	var avoid *host
	var last error
	var lastStatus int
	var lastKind, lastHost string
	attempts := 0
	for attempt := 0; attempt <= c.cfg.Retries; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(c.backoff(attempt))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		h := pin
		if h == nil {
			var err error
			if h, err = c.pool.acquire(ctx, avoid); err != nil {
				return err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		status, err := fn(cctx, h)
		cancel()
		if pin == nil {
			c.pool.release(h)
		}
		attempts++
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		retry, kind := retryable(status, transportErr(err))
		if kind == KindNotFound {
			return &ModelNotFoundError{Model: model, Host: h.String(), Hint: hint}
		}
		last, lastStatus, lastKind, lastHost = err, status, kind, h.String()
		if !retry {
			break
		}
		c.log.Debug("call failed, retrying", "host", lastHost, "status", status, "attempt", attempts, "err", err)
		avoid = h
	}
	return &CallError{Kind: lastKind, Host: lastHost, Status: lastStatus, Attempts: attempts, Err: last}
}

// transportErr is nil for errors that carry an HTTP status (they are
// classified by status), the error itself otherwise.
func transportErr(err error) error {
	var se api.StatusError
	if errors.As(err, &se) {
		return nil
	}
	return err
}

// postJSON sends body to h's base URL + path and decodes a 200 JSON response
// into out. Non-200 responses become api.StatusError with the server's
// message ({"error": "..."} for Ollama, {"error": {"message": ...}} for OpenAI).
func (c *caller) postJSON(ctx context.Context, h *host, path string, body []byte, out any, hdr http.Header) (int, error) {
	return c.doJSON(ctx, h, http.MethodPost, path, body, out, hdr)
}

func (c *caller) doJSON(ctx context.Context, h *host, method, path string, body []byte, out any, hdr http.Header) (int, error) {
	u := h.base.JoinPath(path)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		// The status arrived but the body broke off (server killed mid-response).
		return 0, fmt.Errorf("read %s response: %w", u.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, api.StatusError{StatusCode: resp.StatusCode, Status: resp.Status, ErrorMessage: serverMessage(raw)}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s response: %w", u.Path, err)
		}
	}
	return resp.StatusCode, nil
}

// serverMessage extracts the error text of an Ollama or OpenAI error body.
func serverMessage(raw []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && len(e.Error) > 0 {
		var s string
		if json.Unmarshal(e.Error, &s) == nil {
			return s
		}
		var o struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(e.Error, &o) == nil && o.Message != "" {
			return o.Message
		}
	}
	s := strings.TrimSpace(string(raw))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// parseHost accepts "host:port", "http://host:port[/path]" or https URLs.
func parseHost(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("empty host")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("host %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("host %q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("host %q: no host name", s)
	}
	return u, nil
}
