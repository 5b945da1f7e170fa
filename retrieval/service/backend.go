package service

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/himes-rl/himes/retrieval/corpus"

	"golang.org/x/sync/errgroup"
)

// Backend is a first stage held outside the process: a retrieval service
// (Search-R1's /retrieve protocol, Remote) or an Elasticsearch/OpenSearch
// index (Elastic). The pipeline turns what it returns into chunks, re-ranks
// them with long-term memory and hands them on, exactly as it does with the
// embedded index.
type Backend interface {
	// Name identifies the backend in logs ("remote http://…", "elasticsearch idx").
	Name() string
	// MaxBatch is the most queries one call may carry.
	MaxBatch() int
	// searchBatch runs one call for len(queries) ≤ MaxBatch() queries. A
	// failure of the call is returned as err; a failure of one query's
	// results (a document that breaks the protocol) as errs[i].
	searchBatch(ctx context.Context, queries []string, k int) (lists [][]corpus.Ranked, errs []error, err error)
	// Close releases idle connections.
	Close()
}

// ResultError is a service's answer that breaks the retrieval protocol for
// one query: a rollout that gets it fails with error kind "retrieval_<Kind>"
// and is never scored.
type ResultError struct {
	Kind    string // ResultMalformed or ResultUnknownID
	Backend string
	Msg     string
}

// Kinds of ResultError.
const (
	// ResultMalformed: a document without id or text, a duplicate id, more
	// results than asked, scores not in descending order, a result count
	// that does not match the query count.
	ResultMalformed = "malformed"
	// ResultUnknownID: an id the configured knowledge base (data.kb) does not
	// hold, neither as a chunk nor as a passage: the service serves another corpus.
	ResultUnknownID = "unknown_id"
)

func (e *ResultError) Error() string { return e.Backend + ": " + e.Kind + ": " + e.Msg }

func resultErr(backend, kind, format string, args ...any) *ResultError {
	return &ResultError{Kind: kind, Backend: backend, Msg: fmt.Sprintf(format, args...)}
}

// checkList validates one query's results: at most k, ids present and
// unique, text present, scores finite and in descending order, ids known to
// the knowledge base when one is configured (known != nil).
func checkList(backend string, list []corpus.Ranked, k int, known func(string) bool) error {
	if len(list) > k {
		return resultErr(backend, ResultMalformed, "%d results for topk %d", len(list), k)
	}
	seen := make(map[string]bool, len(list))
	for i, r := range list {
		switch {
		case r.ID == "":
			return resultErr(backend, ResultMalformed, "result %d has no document id", i+1)
		case seen[r.ID]:
			return resultErr(backend, ResultMalformed, "document %q returned twice", r.ID)
		case strings.TrimSpace(r.Text) == "":
			return resultErr(backend, ResultMalformed, "document %q has no text", r.ID)
		case math.IsNaN(r.Score) || math.IsInf(r.Score, 0):
			return resultErr(backend, ResultMalformed, "document %q has score %v", r.ID, r.Score)
		case i > 0 && r.Score > list[i-1].Score:
			// A distance (FAISS L2) instead of a similarity would invert the
			// ranking that re-ranking and the reward rely on.
			return resultErr(backend, ResultMalformed, "scores not in descending order: %q (%v) after %q (%v)",
				r.ID, r.Score, list[i-1].ID, list[i-1].Score)
		case known != nil && !known(r.ID):
			return resultErr(backend, ResultUnknownID, "document %q is not in the knowledge base", r.ID)
		}
		seen[r.ID] = true
	}
	return nil
}

// Search runs queries through s in batches of at most s.MaxBatch()
// (the batches concurrently; the service's host pool bounds what is in
// flight). Identical queries are sent once. errs[i] is query i's failure.
func Search(ctx context.Context, s Backend, queries []string, k int, known func(string) bool) ([][]corpus.Ranked, []error) {
	lists := make([][]corpus.Ranked, len(queries))
	errs := make([]error, len(queries))
	var distinct []string
	first := map[string]int{} // query → its index in distinct
	slot := make([]int, len(queries))
	for i, q := range queries {
		j, ok := first[q]
		if !ok {
			j = len(distinct)
			first[q] = j
			distinct = append(distinct, q)
		}
		slot[i] = j
	}
	dl := make([][]corpus.Ranked, len(distinct))
	de := make([]error, len(distinct))
	var eg errgroup.Group
	for lo := 0; lo < len(distinct); lo += s.MaxBatch() {
		hi := min(lo+s.MaxBatch(), len(distinct))
		eg.Go(func() error {
			got, perQuery, err := s.searchBatch(ctx, distinct[lo:hi], k)
			for j := lo; j < hi; j++ {
				switch {
				case err != nil:
					de[j] = err
				case perQuery != nil && perQuery[j-lo] != nil:
					de[j] = perQuery[j-lo]
				default:
					dl[j] = got[j-lo]
					de[j] = checkList(s.Name(), dl[j], k, known)
				}
			}
			return nil
		})
	}
	_ = eg.Wait()
	for i, j := range slot {
		lists[i], errs[i] = dl[j], de[j]
		if errs[i] != nil {
			lists[i] = nil
		}
	}
	return lists, errs
}
