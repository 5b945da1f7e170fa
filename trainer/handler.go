package trainer

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/himes-rl/himes/internal/reqbody"
)

// DefaultMaxBodyBytes bounds request bodies (PROTOCOL.md, "Conventions").
const DefaultMaxBodyBytes = 64 << 20

// HandlerOption configures NewHandler.
type HandlerOption func(*handler)

// WithMaxBodyBytes refuses request bodies larger than n bytes with 413
// (default DefaultMaxBodyBytes).
func WithMaxBodyBytes(n int64) HandlerOption { return func(h *handler) { h.maxBody = n } }

// WithBodyBudget bounds the body bytes of all requests in flight together
// (default DefaultBodyBudget): the per-request limit alone let a few
// concurrent large bodies take the server's memory (item 9 of issue 27).
// Bytes are charged as they arrive, so a silent client holds almost none
// (item 3 of issue 33); a request that finds the budget full is answered
// 503 (retryable) rather than waiting behind the others.
func WithBodyBudget(n int64) HandlerOption {
	return func(h *handler) { h.budget = reqbody.NewBudget(n) }
}

// WithBodyTimeouts sets how long each 64 KiB of a body and the whole body
// may take to arrive (0: reqbody.DefaultChunkTimeout, reqbody.DefaultTimeout);
// a slower client is answered 408 and disconnected.
func WithBodyTimeouts(chunk, whole time.Duration) HandlerOption {
	return func(h *handler) { h.chunkTimeout, h.bodyTimeout = chunk, whole }
}

// DefaultBodyBudget is four maximal bodies.
const DefaultBodyBudget = 4 * DefaultMaxBodyBytes

// NewHandler serves the protocol for p. When token is non-empty every
// request must carry "Authorization: Bearer <token>". /v1/logprobs is served
// when p implements Scorer, /v1/delete when p implements Deleter (and
// info.capabilities.delete is true only then, and only if p's own Info says
// so: a Client proxying an older endpoint implements Deleter but cannot delete). Idempotency of step_ids is p's job (the embedded policy and
// Client both provide it), so the handler adds no state of its own.
func NewHandler(p Policy, token string, opts ...HandlerOption) http.Handler {
	h := &handler{p: p, token: token, maxBody: DefaultMaxBodyBytes}
	for _, o := range opts {
		o(h)
	}
	if h.budget == nil {
		h.budget = reqbody.NewBudget(max(DefaultBodyBudget, h.maxBody))
	}
	return h
}

type handler struct {
	p                         Policy
	token                     string
	maxBody                   int64
	budget                    *reqbody.Budget
	chunkTimeout, bodyTimeout time.Duration
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1 {
			writeError(w, NewError(CodeUnauthorized, "missing or wrong bearer token"))
			return
		}
	}
	ctx := r.Context()
	switch r.URL.Path {
	case "/v1/info":
		if !method(w, r, http.MethodGet) {
			return
		}
		info, err := h.p.Info(ctx)
		if err == nil && h.token != "" {
			info.Capabilities.Auth = true
		}
		if _, ok := h.p.(Deleter); !ok {
			info.Capabilities.Delete = false
		}
		reply(w, info, err)
	case "/v1/checkpoints":
		if !method(w, r, http.MethodGet) {
			return
		}
		list, err := h.p.Checkpoints(ctx)
		if err != nil {
			writeError(w, err)
			return
		}
		info, err := h.p.Info(ctx)
		reply(w, struct {
			Checkpoints   []CheckpointInfo `json:"checkpoints"`
			PolicyVersion int64            `json:"policy_version"`
		}{list, info.PolicyVersion}, err)
	case "/v1/sample":
		serve(w, r, h, ctx, h.p.Sample)
	case "/v1/logprobs":
		sc, ok := h.p.(Scorer)
		if !ok {
			writeError(w, NewError(CodeNotFound, "this endpoint does not implement /v1/logprobs"))
			return
		}
		serve(w, r, h, ctx, sc.Logprobs)
	// A mutating call runs to completion even if the client goes away: its
	// result is then stored for the client's retry with the same step_id.
	case "/v1/sft_step":
		serve(w, r, h, context.WithoutCancel(ctx), h.p.SFTStep)
	case "/v1/grpo_step":
		serve(w, r, h, context.WithoutCancel(ctx), h.p.GRPOStep)
	case "/v1/save":
		serve(w, r, h, context.WithoutCancel(ctx), h.p.Save)
	case "/v1/load":
		serve(w, r, h, context.WithoutCancel(ctx), h.p.Load)
	case "/v1/delete":
		d, ok := h.p.(Deleter)
		if !ok {
			writeError(w, NewError(CodeNotFound, "this endpoint does not implement /v1/delete"))
			return
		}
		serve(w, r, h, context.WithoutCancel(ctx), d.Delete)
	default:
		writeError(w, NewError(CodeNotFound, "no such endpoint %s %s", r.Method, r.URL.Path))
	}
}

// serve decodes a POST body into Req, calls f, and writes its result.
func serve[Req, Resp any](w http.ResponseWriter, r *http.Request, h *handler, ctx context.Context, f func(context.Context, Req) (Resp, error)) {
	if !method(w, r, http.MethodPost) {
		return
	}
	raw, release, err := reqbody.Read(w, r, h.budget, reqbody.Limits{MaxBytes: h.maxBody, ChunkTimeout: h.chunkTimeout, Timeout: h.bodyTimeout})
	if err != nil {
		var be *reqbody.Error
		if !errors.As(err, &be) {
			writeError(w, Invalidf("request body: %v", err))
			return
		}
		e := Invalidf("%s", be.Msg)
		switch be.Status {
		case http.StatusServiceUnavailable:
			e = NewError(CodeUnavailable, "%s", be.Msg)
			w.Header().Set("Retry-After", "1")
		case http.StatusBadRequest:
		default:
			e.Status = be.Status
		}
		writeError(w, e)
		return
	}
	defer release()
	var req Req
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&req); err != nil {
		writeError(w, Invalidf("request body: %v", err))
		return
	}
	// One JSON value, nothing after it (as retrieval serve): a body with
	// trailing bytes was not written by a conforming client.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeError(w, Invalidf("request body: trailing data after the JSON object"))
		return
	}
	resp, err := f(ctx, req)
	reply(w, resp, err)
}

func method(w http.ResponseWriter, r *http.Request, want string) bool {
	if r.Method == want {
		return true
	}
	e := Invalidf("%s %s: method not allowed, use %s", r.Method, r.URL.Path, want)
	e.Status = http.StatusMethodNotAllowed
	w.Header().Set("Allow", want)
	writeError(w, e)
	return false
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	raw, err := json.Marshal(v)
	if err != nil {
		// NaN or Inf in a result: the protocol never sends them.
		writeError(w, NewError(CodeInternal, "encode response: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(append(raw, '\n'))
}

// writeError answers a protocol error; errors that are not *Error become
// internal errors (or unavailable when the request was cancelled).
func writeError(w http.ResponseWriter, err error) {
	var pe *Error
	if !errors.As(err, &pe) {
		code := CodeInternal
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			code = CodeUnavailable
		}
		slog.Error("trainer endpoint error", "err", err)
		pe = NewError(code, "%v", err)
	}
	raw, _ := json.Marshal(struct {
		Error *Error `json:"error"`
	}{pe})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(pe.HTTPStatus())
	_, _ = fmt.Fprintf(w, "%s\n", raw)
}
