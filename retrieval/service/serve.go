package service

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/himes-rl/himes/retrieval/corpus"

	"golang.org/x/sync/semaphore"
)

// Limits of one request to the retrieval handler.
const (
	ServeMaxQueries = 4096
	ServeMaxTopK    = 1000
	serveMaxBody    = 32 << 20
)

// Searcher is what a handler serves: a retrieval pipeline's first stage.
type Searcher interface {
	// SearchBatch returns the top k chunks of each query; errs[i] is query i's failure.
	SearchBatch(ctx context.Context, queries []string, k int) (lists [][]corpus.Ranked, errs []error)
	// Served says what is served, for GET /health.
	Served() Served
}

// Served is what GET /health reports of a Searcher.
type Served struct {
	Method    string // the retrieval method
	Documents int    // the chunks searched
	Analyzer  string // the analyzer's ID
}

// NewHandler serves p's first stage over the protocol (retrieval/service/PROTOCOL.md):
// POST /retrieve answers each query with its top-k chunks, and GET /health
// says what is served. Long-term memory is the client's: it re-ranks what
// the handler returns, so the handler never sees users. defaultK answers a
// request without topk (Search-R1's server does the same with its --topk).
func NewHandler(p Searcher, defaultK int, opts ...HandlerOption) http.Handler {
	o := handlerOptions{budget: ServeBodyBudget}
	for _, f := range opts {
		f(&o)
	}
	budget := semaphore.NewWeighted(max(o.budget, serveMaxBody))
	mux := http.NewServeMux()
	mux.HandleFunc("POST /retrieve", func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > serveMaxBody {
			// Refused from the header alone, before a byte of the body is read.
			serveError(w, http.StatusRequestEntityTooLarge, "request body of %d bytes, at most %d", r.ContentLength, serveMaxBody)
			return
		}
		share := int64(serveMaxBody)
		if r.ContentLength >= 0 {
			share = max(r.ContentLength, 1)
		}
		if !budget.TryAcquire(share) {
			if o.waiting != nil {
				o.waiting() // a test's hook: this request waits for its share
			}
			if err := budget.Acquire(r.Context(), share); err != nil {
				serveError(w, http.StatusServiceUnavailable, "waiting for memory for the request body: %v", err)
				return
			}
		}
		defer budget.Release(share)
		var req RetrieveRequest
		body := http.MaxBytesReader(w, r.Body, serveMaxBody)
		dec := json.NewDecoder(body)
		if err := dec.Decode(&req); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				serveError(w, http.StatusRequestEntityTooLarge, "request body over %d bytes", serveMaxBody)
				return
			}
			serveError(w, http.StatusBadRequest, "request body: %v", err)
			return
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			serveError(w, http.StatusBadRequest, "request body: trailing data after the JSON object")
			return
		}
		switch {
		case req.Queries == nil:
			serveError(w, http.StatusBadRequest, `"queries" is required (a list of strings)`)
			return
		case len(req.Queries) > ServeMaxQueries:
			serveError(w, http.StatusRequestEntityTooLarge, "%d queries: at most %d per request", len(req.Queries), ServeMaxQueries)
			return
		case req.TopK < 0 || req.TopK > ServeMaxTopK:
			serveError(w, http.StatusBadRequest, `"topk" must be in [1, %d], got %d`, ServeMaxTopK, req.TopK)
			return
		}
		k := req.TopK
		if k == 0 {
			k = defaultK
		}
		lists, errs := p.SearchBatch(r.Context(), req.Queries, k)
		for i, err := range errs {
			if err != nil {
				if r.Context().Err() != nil {
					return // the client went away
				}
				slog.Warn("retrieval serve: query failed", "query", i+1, "err", err)
				serveError(w, http.StatusInternalServerError, "query %d: %v", i+1, err)
				return
			}
		}
		var resp any
		if req.ReturnScores {
			out := RetrieveResponse{Result: make([][]ScoredDocument, len(lists))}
			for i, list := range lists {
				out.Result[i] = make([]ScoredDocument, len(list))
				for j, c := range list {
					out.Result[i][j] = ScoredDocument{Document: documentOf(c.Chunk), Score: &c.Score}
				}
			}
			resp = out
		} else {
			// Search-R1 answers without scores with the bare documents.
			out := struct {
				Result [][]Document `json:"result"`
			}{Result: make([][]Document, len(lists))}
			for i, list := range lists {
				out.Result[i] = make([]Document, len(list))
				for j, c := range list {
					out.Result[i][j] = documentOf(c.Chunk)
				}
			}
			resp = out
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(resp); err != nil {
			slog.Debug("retrieval serve: write response", "err", err)
		}
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		s := p.Served()
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "ok", "method": s.Method,
			"documents": s.Documents, "analyzer": s.Analyzer, "default_topk": defaultK})
	})
	if o.token == "" {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(o.token)) != 1 {
			serveError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// HandlerOption configures NewHandler.
type HandlerOption func(*handlerOptions)

type handlerOptions struct {
	token   string
	budget  int64
	waiting func() // called when a request waits for its share (tests)
}

// WithToken makes every request carry "Authorization: Bearer <token>".
func WithToken(token string) HandlerOption { return func(o *handlerOptions) { o.token = token } }

// WithBodyBudget bounds the body bytes of the requests in flight together
// (default ServeBodyBudget); a request waits for its share, reserved from
// its Content-Length, before its body is read (item 9 of issue 27).
func WithBodyBudget(n int64) HandlerOption { return func(o *handlerOptions) { o.budget = n } }

// ServeBodyBudget is four maximal bodies.
const ServeBodyBudget = 4 * serveMaxBody

// documentOf is a chunk as the protocol's document: Search-R1's id and
// contents, and the exact title, text and passage id for our clients.
func documentOf(c corpus.Chunk) Document {
	return Document{ID: corpus.DocID(c.ID), Contents: corpus.FormatContents(c), Title: c.Title, Text: c.Text, PassageID: c.PassageID}
}

func serveError(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": strings.TrimSpace(fmt.Sprintf(format, args...))})
}
