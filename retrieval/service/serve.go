package service

import (
	"bufio"
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
	"github.com/himes-rl/himes/retrieval/corpus"
)

// Limits of one request to the retrieval handler.
const (
	ServeMaxQueries = 4096
	ServeMaxTopK    = 1000
	// ServeMaxResults bounds queries × topk of one request (item 2 of
	// issue 33: 400 queries × topk 1000 took the server past 3 GB). Our
	// client splits its batches to stay within it.
	ServeMaxResults = 100_000
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
	budget := reqbody.NewBudget(max(o.budget, serveMaxBody))
	mux := http.NewServeMux()
	mux.HandleFunc("POST /retrieve", func(w http.ResponseWriter, r *http.Request) {
		raw, release, err := reqbody.Read(w, r, budget, reqbody.Limits{MaxBytes: serveMaxBody, ChunkTimeout: o.chunkTimeout, Timeout: o.bodyTimeout})
		if err != nil {
			var be *reqbody.Error
			if errors.As(err, &be) {
				if be.Status == http.StatusServiceUnavailable {
					w.Header().Set("Retry-After", "1")
				}
				serveError(w, be.Status, "%s", be.Msg)
				return
			}
			serveError(w, http.StatusBadRequest, "request body: %v", err)
			return
		}
		defer release()
		var req RetrieveRequest
		dec := json.NewDecoder(bytes.NewReader(raw))
		if err := dec.Decode(&req); err != nil {
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
		if n := len(req.Queries) * k; n > ServeMaxResults {
			serveError(w, http.StatusRequestEntityTooLarge, "%d queries × topk %d = %d results: at most %d results per request; send fewer queries per request",
				len(req.Queries), k, n, ServeMaxResults)
			return
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
		if err := writeResult(w, lists, req.ReturnScores); err != nil {
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
	token                     string
	budget                    int64
	chunkTimeout, bodyTimeout time.Duration
}

// WithToken makes every request carry "Authorization: Bearer <token>".
func WithToken(token string) HandlerOption { return func(o *handlerOptions) { o.token = token } }

// WithBodyBudget bounds the body bytes of the requests in flight together
// (default ServeBodyBudget), charged as they arrive; a request that finds
// it full is answered 503 rather than waiting (internal/reqbody).
func WithBodyBudget(n int64) HandlerOption { return func(o *handlerOptions) { o.budget = n } }

// WithBodyTimeouts sets how long each 64 KiB of a body and the whole body
// may take to arrive (0: reqbody.DefaultChunkTimeout, reqbody.DefaultTimeout);
// a client slower than that is answered 408 and disconnected.
func WithBodyTimeouts(chunk, whole time.Duration) HandlerOption {
	return func(o *handlerOptions) { o.chunkTimeout, o.bodyTimeout = chunk, whole }
}

// ServeBodyBudget is four maximal bodies.
const ServeBodyBudget = 4 * serveMaxBody

// documentOf is a chunk as the protocol's document: Search-R1's id and
// contents, and the exact title, text and passage id for our clients.
func documentOf(c corpus.Chunk) Document {
	return Document{ID: corpus.DocID(c.ID), Contents: corpus.FormatContents(c), Title: c.Title, Text: c.Text, PassageID: c.PassageID}
}

// writeResult streams {"result": [[document, …], …]} through a bounded
// buffer, one document at a time: the response is never whole in memory.
// Without scores it is Search-R1's bare documents.
func writeResult(w http.ResponseWriter, lists [][]corpus.Ranked, scores bool) error {
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 32<<10)
	bw.WriteString(`{"result":[`)
	for i, list := range lists {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteByte('[')
		for j, c := range list {
			if j > 0 {
				bw.WriteByte(',')
			}
			var v any = documentOf(c.Chunk)
			if scores {
				v = ScoredDocument{Document: documentOf(c.Chunk), Score: &c.Score}
			}
			raw, err := json.Marshal(v)
			if err != nil {
				// Mid-stream: cut the connection, so that the client
				// sees a failed call and never a truncated answer.
				panic(http.ErrAbortHandler)
			}
			if _, err := bw.Write(raw); err != nil {
				return err // the client went away
			}
		}
		bw.WriteByte(']')
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

func serveError(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": strings.TrimSpace(fmt.Sprintf(format, args...))})
}
