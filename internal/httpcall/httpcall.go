// Package httpcall is the one HTTP layer for the model servers himes calls
// (Ollama chat and embed, OpenAI-compatible chat, retrieval services): a pool
// of hosts with per-host concurrency limits and least-loaded routing, a
// per-call timeout, and retries with exponential backoff and jitter on
// connection errors, timeouts, 429 and 5xx, never on other 4xx.
package httpcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ollama/ollama/api"
)

// Host is one server of a responder with its own concurrency limit.
type Host struct {
	base     *url.URL
	limit    int
	inflight int // guarded by Pool.mu
}

func (h *Host) String() string { return h.base.String() }

// Pool routes each call to the least-loaded host with a free slot
// (load = in-flight / limit; ties go to the earlier host) and makes callers
// wait, cancellably, while every host is full.
type Pool struct {
	mu    sync.Mutex
	hosts []*Host
	wake  chan struct{} // closed and replaced whenever a slot frees
}

func NewPool(bases []*url.URL, limits []int) *Pool {
	p := &Pool{wake: make(chan struct{})}
	for i, b := range bases {
		p.hosts = append(p.hosts, &Host{base: b, limit: limits[i]})
	}
	return p
}

// Hosts lists the pool's hosts in configuration order.
func (p *Pool) Hosts() []*Host { return p.hosts }

// Capacity is the total number of concurrent calls the hosts accept.
func (p *Pool) Capacity() int {
	n := 0
	for _, h := range p.hosts {
		n += h.limit
	}
	return n
}

// Acquire takes a slot on the least-loaded host. avoid (the host that just
// failed) is only chosen when no other host has a free slot.
func (p *Pool) Acquire(ctx context.Context, avoid *Host) (*Host, error) {
	for {
		p.mu.Lock()
		var best *Host
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

func (p *Pool) Release(h *Host) {
	p.mu.Lock()
	h.inflight--
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
}

// Caller runs HTTP calls against a host pool with a per-call timeout and
// retries with exponential backoff and jitter.
type Caller struct {
	pool   *Pool
	cfg    Policy
	client *http.Client
	log    *slog.Logger
	what   string // "ollama" or "openai", for messages
	wait   *Backoff
}

// NewClient returns a client sized for the pool: the default transport
// keeps only 2 idle connections per host, so a burst of N concurrent calls
// would open and tear down connections on every call.
func NewClient(perHost, total int, timeout time.Duration) *http.Client {
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

func NewCaller(what string, pool *Pool, cfg Policy, seed uint64) *Caller {
	perHost := 0
	for _, h := range pool.hosts {
		perHost = max(perHost, h.limit)
	}
	return &Caller{
		pool: pool, cfg: cfg, what: what,
		client: NewClient(perHost, pool.Capacity(), cfg.Timeout),
		log:    slog.Default().With("component", "httpcall", "server", what),
		wait:   NewBackoff(cfg.BackoffBase, cfg.BackoffMax, seed),
	}
}

// WrapTransport wraps the caller's HTTP transport (a proxy, a fault
// injector in tests).
func (c *Caller) WrapTransport(wrap func(http.RoundTripper) http.RoundTripper) {
	c.client.Transport = wrap(c.client.Transport)
}

// Pool is the caller's host pool.
func (c *Caller) Pool() *Pool { return c.pool }

// Close releases idle connections.
func (c *Caller) Close() { c.client.CloseIdleConnections() }

// AttemptFunc performs one attempt against h within ctx (which carries the
// per-call deadline). It returns the HTTP status (0 when there was no response).
type AttemptFunc func(ctx context.Context, h *Host) (status int, err error)

// Call runs fn on the least-loaded host (or on pin when set, without taking a
// slot), retrying retryable failures. A 404 becomes a *ModelNotFoundError;
// other final failures a *CallError. Cancellation of ctx returns ctx.Err().
func (c *Caller) Call(ctx context.Context, pin *Host, model, hint string, fn AttemptFunc) error {
	var avoid *Host
	var notFound *ModelNotFoundError
	var last CallError
	err := Retry(ctx, c.cfg.Retries, c.wait, func(int) (bool, error) {
		h := pin
		if h == nil {
			var err error
			if h, err = c.pool.Acquire(ctx, avoid); err != nil {
				return false, err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		status, err := fn(cctx, h)
		cancel()
		if pin == nil {
			c.pool.Release(h)
		}
		last.Attempts++
		if err == nil {
			return false, nil
		}
		retry, kind := retryable(status, transportErr(err))
		if kind == KindNotFound {
			notFound = &ModelNotFoundError{Model: model, Host: h.String(), Hint: hint}
			return false, notFound
		}
		last.Err, last.Status, last.Kind, last.Host = err, status, kind, h.String()
		avoid = h
		return retry, &last
	}, func(n int, _ time.Duration, err error) {
		c.log.Debug("call failed, retrying", "host", last.Host, "status", last.Status, "attempt", n, "err", last.Err)
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case notFound != nil:
		return notFound
	case last.Attempts > 0 && last.Err != nil:
		return &CallError{Kind: last.Kind, Host: last.Host, Status: last.Status, Attempts: last.Attempts, Err: last.Err}
	default:
		return err // the pool could not give a host
	}
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

// PostJSON sends body to h's base URL + path and decodes a 200 JSON response
// into out. Non-200 responses become api.StatusError with the server's
// message ({"error": "..."} for Ollama, {"error": {"message": ...}} for OpenAI).
func (c *Caller) PostJSON(ctx context.Context, h *Host, path string, body []byte, out any, hdr http.Header) (int, error) {
	return c.DoJSON(ctx, h, http.MethodPost, path, body, out, hdr)
}

// DoJSON is PostJSON with any method; path may end in a ?query.
func (c *Caller) DoJSON(ctx context.Context, h *Host, method, path string, body []byte, out any, hdr http.Header) (int, error) {
	path, query, _ := strings.Cut(path, "?")
	u := h.base.JoinPath(path)
	u.RawQuery = query
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
		return resp.StatusCode, api.StatusError{StatusCode: resp.StatusCode, Status: resp.Status, ErrorMessage: ServerMessage(raw)}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, &MalformedError{What: fmt.Sprintf("decode %s response: %v", u.Path, err)}
		}
	}
	return resp.StatusCode, nil
}

// ServerMessage extracts the error text of an Ollama or OpenAI error body.
func ServerMessage(raw []byte) string {
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

// ParseHost accepts "host:port", "http://host:port[/path]" or https URLs.
func ParseHost(s string) (*url.URL, error) {
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
