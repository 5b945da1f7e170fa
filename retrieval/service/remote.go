package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/himes-rl/himes/internal/httpcall"
	"github.com/himes-rl/himes/retrieval/corpus"
)

// The protocol's wire types (retrieval/service/PROTOCOL.md): Search-R1's
// retrieval_server.py, plus optional fields of our own that Search-R1
// clients ignore.
type (
	// RetrieveRequest is the body of POST /retrieve.
	RetrieveRequest struct {
		Queries      []string `json:"queries"`
		TopK         int      `json:"topk,omitempty"`
		ReturnScores bool     `json:"return_scores"`
	}
	// RetrieveResponse is its answer with return_scores: one list per query, best first.
	RetrieveResponse struct {
		Result [][]ScoredDocument `json:"result"`
	}
	// ScoredDocument is one result.
	ScoredDocument struct {
		Document Document `json:"document"`
		Score    *float64 `json:"score"`
	}
	// Document is a corpus record: Search-R1 sends id and contents (often
	// `"Title"\ntext`); title, text and passage_id are optional extensions
	// (`himes retrieval serve` sends them so that chunks round-trip exactly).
	Document struct {
		ID        corpus.DocID `json:"id"`
		Contents  string       `json:"contents"`
		Title     string       `json:"title,omitempty"`
		Text      string       `json:"text,omitempty"`
		PassageID string       `json:"passage_id,omitempty"`
	}
)

// Chunk is the chunk a returned document becomes.
func (d Document) Chunk() corpus.Chunk {
	c := corpus.Chunk{ID: string(d.ID), PassageID: d.PassageID}
	if d.Text != "" {
		c.Title, c.Text = d.Title, d.Text
	} else {
		c.Title, c.Text = corpus.ParseContents(d.Contents)
	}
	if c.PassageID == "" {
		c.PassageID = c.ID
	}
	return c
}

// Remote is a retrieval service speaking the protocol, on one or more hosts.
type Remote struct {
	call     *httpcall.Caller
	maxBatch int
	name     string
	hdr      http.Header // the bearer token, when the service wants one
}

// NewRemoteService is NewRemote for retrieval.remote, with its token.
func NewRemoteService(cfg RemoteConfig, seed uint64) (*Remote, error) {
	r, err := NewRemote(cfg.Call, seed)
	if err != nil || cfg.TokenEnv == "" {
		return r, err
	}
	tok := os.Getenv(cfg.TokenEnv)
	if tok == "" {
		return nil, fmt.Errorf("retrieval.remote.token_env: environment variable %s is not set", cfg.TokenEnv)
	}
	r.hdr = http.Header{"Authorization": {"Bearer " + tok}}
	return r, nil
}

// NewRemote returns a client of the service cfg names. seed drives only
// the retry jitter.
func NewRemote(cfg Config, seed uint64) (*Remote, error) {
	pool, err := servicePool(cfg)
	if err != nil {
		return nil, err
	}
	return &Remote{call: httpcall.NewCaller("retrieval", pool, cfg.policy(), seed), maxBatch: cfg.MaxBatch,
		name: "remote " + strings.Join(cfg.URL, ",")}, nil
}

func servicePool(cfg Config) (*httpcall.Pool, error) {
	bases := make([]*url.URL, len(cfg.URL))
	limits := make([]int, len(cfg.URL))
	for i, h := range cfg.URL {
		u, err := httpcall.ParseHost(h)
		if err != nil {
			return nil, err
		}
		bases[i], limits[i] = u, cfg.MaxPerHost
	}
	return httpcall.NewPool(bases, limits), nil
}

func (s Config) policy() httpcall.Policy {
	return httpcall.Policy{Timeout: s.Timeout, Retries: s.Retries, BackoffBase: s.BackoffBase, BackoffMax: s.BackoffMax}
}

func (r *Remote) Name() string  { return r.name }
func (r *Remote) MaxBatch() int { return r.maxBatch }
func (r *Remote) Close()        { r.call.Close() }

// Probe sends one query to every host, so that an unreachable host, a
// server without /retrieve or one that does not answer in the protocol's
// format stops the run before it starts.
func (r *Remote) Probe(ctx context.Context) error {
	for _, h := range r.call.Pool().Hosts() {
		if _, err := r.post(ctx, h, []string{"probe"}, 1); err != nil {
			return fmt.Errorf("retrieval service %s: %w", h, err)
		}
	}
	return nil
}

func (r *Remote) searchBatch(ctx context.Context, queries []string, k int) ([][]corpus.Ranked, []error, error) {
	// At most ServeMaxResults results a request, as himes retrieval serve
	// accepts (max_batch × candidates may be more).
	per := max(1, ServeMaxResults/max(k, 1))
	lists := make([][]corpus.Ranked, 0, len(queries))
	for lo := 0; lo < len(queries); lo += per {
		part, err := r.post(ctx, nil, queries[lo:min(lo+per, len(queries))], k)
		if err != nil {
			return nil, nil, err
		}
		lists = append(lists, part...)
	}
	return lists, nil, nil
}

// post runs one /retrieve call (on pin when set) and converts the answer.
func (r *Remote) post(ctx context.Context, pin *httpcall.Host, queries []string, k int) ([][]corpus.Ranked, error) {
	body, err := json.Marshal(RetrieveRequest{Queries: queries, TopK: k, ReturnScores: true})
	if err != nil {
		return nil, err
	}
	var resp RetrieveResponse
	err = r.call.Call(ctx, pin, "POST /retrieve", "himes retrieval serve --config X", func(ctx context.Context, h *httpcall.Host) (int, error) {
		resp = RetrieveResponse{}
		st, err := r.call.PostJSON(ctx, h, "/retrieve", body, &resp, r.hdr)
		if err == nil {
			err = resp.check(len(queries))
		}
		return st, err
	})
	if err != nil {
		return nil, err
	}
	out := make([][]corpus.Ranked, len(queries))
	for i, list := range resp.Result {
		out[i] = make([]corpus.Ranked, len(list))
		for j, sd := range list {
			out[i][j] = corpus.Ranked{Chunk: sd.Document.Chunk(), Score: *sd.Score}
		}
	}
	return out, nil
}

// check rejects an answer that is not the documented shape: as a
// MalformedError, which is not retried.
func (r *RetrieveResponse) check(n int) error {
	if r.Result == nil {
		return &httpcall.MalformedError{What: `/retrieve response has no "result"`}
	}
	if len(r.Result) != n {
		return &httpcall.MalformedError{What: fmt.Sprintf("/retrieve answered %d result lists for %d queries", len(r.Result), n)}
	}
	for i, list := range r.Result {
		for j, sd := range list {
			if sd.Score == nil {
				return &httpcall.MalformedError{What: fmt.Sprintf(`/retrieve result %d of query %d has no "score" (return_scores was true)`, j+1, i+1)}
			}
		}
	}
	return nil
}
