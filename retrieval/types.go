package retrieval

import (
	"context"

	"github.com/himes-rl/himes/memory"
	"github.com/himes-rl/himes/retrieval/corpus"
)

// Chunk and Ranked are the knowledge base's types (package corpus): the
// pipeline's results are its chunks.
type (
	Chunk  = corpus.Chunk
	Ranked = corpus.Ranked
)

// Scored is an id and a score, as recorded in traces and TREC runs.
type Scored struct {
	ID    string  `json:"id"`
	Score float64 `json:"score"`
}

// Trace records how a ranking came about; it goes into the rollout ledger.
type Trace struct {
	Candidates []Scored           `json:"candidates"` // first-stage retrieval, in retrieval order
	Memories   []memory.Activated `json:"memories"`   // H_n; empty when memory is off or nothing activated
	Final      []Scored           `json:"final"`      // the final top-k with final scores
	// Reranked: the memories re-ranked the candidates (activated, and the
	// most similar at least memory.rerank_floor).
	Reranked bool `json:"reranked,omitempty"`
}

// Result is the output of one retrieval call.
type Result struct {
	Chunks []Ranked `json:"chunks"` // final top-k, best first
	Trace  Trace    `json:"trace"`
}

// Retriever is what rollouts and evaluation call: retrieve for the rewrite,
// activate long-term memory with the user's original query, re-rank.
type Retriever interface {
	Retrieve(ctx context.Context, user, rewrite, query string) (Result, error)
}

// Request is one retrieval of a batch: Retrieve's arguments, and At (zero:
// none) restricting long-term memory to memories strictly older than it.
type Request struct {
	User, Rewrite, Query string
	// Seq is the query's position in its user's question history: the
	// memory holds only what the user had before it (0: all of it).
	Seq int64
}

// BatchRetriever retrieves many requests at once, so that a retrieval
// service gets one call per batch of a step's rewrites instead of one per
// rollout. errs[i] is request i's failure (nil on success).
type BatchRetriever interface {
	Retriever
	RetrieveBatch(ctx context.Context, reqs []Request) (results []Result, errs []error)
}
