package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/himes-rl/himes/retrieval/corpus"
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
func NewHandler(p Searcher, defaultK int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /retrieve", func(w http.ResponseWriter, r *http.Request) {
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
	return mux
}

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
