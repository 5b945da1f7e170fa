package rollout

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/himes-rl/himes/internal/httpcall"
	"github.com/himes-rl/himes/retrieval/service"
)

// Error kinds recorded in Record.ErrorKind. A rollout that fails is recorded
// with its kind and excluded from scoring and from advantages. The kinds of a
// failed HTTP call come from internal/httpcall.
const (
	KindRetrieval = "retrieval" // the retriever failed (the embedded index, the embedder)
	KindResponder = "responder" // anything else the responder returned
	// KindUnjudged: reward.rank > 0 but the turn has no relevance
	// judgments, so the rank term cannot be computed (never scored as 0).
	KindUnjudged    = "unjudged"
	KindTimeout     = httpcall.KindTimeout
	KindUnavailable = httpcall.KindUnavailable
	KindRejected    = httpcall.KindRejected
	KindNotFound    = httpcall.KindNotFound
	KindMalformed   = httpcall.KindMalformed
)

// ModelNotFoundError and CallError are the HTTP layer's: a missing model
// (fatal for the run) and a call that failed after its retries.
type (
	ModelNotFoundError = httpcall.ModelNotFoundError
	CallError          = httpcall.CallError
)

// Kinds of a failed call to a retrieval service (retrieval.method remote or
// elasticsearch): the HTTP layer's kinds, and answers that break the
// protocol, prefixed with "retrieval_".
const (
	KindRetrievalTimeout     = "retrieval_" + httpcall.KindTimeout     // every attempt timed out
	KindRetrievalUnavailable = "retrieval_" + httpcall.KindUnavailable // connection errors, 429, 5xx
	KindRetrievalRejected    = "retrieval_" + httpcall.KindRejected    // 4xx other than 404
	KindRetrievalMalformed   = "retrieval_" + httpcall.KindMalformed   // undecodable JSON, wrong counts, missing ids, texts or scores
	KindRetrievalUnknownID   = "retrieval_" + service.ResultUnknownID
)

// retrievalKind classifies a retrieval failure.
func retrievalKind(err error) string {
	var ce *CallError
	var re *service.ResultError
	switch {
	case errors.As(err, &re):
		return "retrieval_" + re.Kind
	case errors.As(err, &ce):
		return "retrieval_" + ce.Kind
	case errors.Is(err, context.DeadlineExceeded):
		return KindRetrievalTimeout
	}
	return KindRetrieval
}

// errorKind classifies a rollout error for the ledger.
func errorKind(err error) string {
	var nf *ModelNotFoundError
	var ce *CallError
	switch {
	case errors.As(err, &nf):
		return KindNotFound
	case errors.As(err, &ce):
		return ce.Kind
	case errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	}
	return KindResponder
}

// isFatal reports whether err must stop the whole run rather than fail one rollout.
func isFatal(err error) bool {
	var nf *ModelNotFoundError
	return errors.As(err, &nf)
}

// ErrTooManyFailed matches a *TooManyFailedError (errors.Is).
var ErrTooManyFailed = errors.New("too many failed rollouts")

// TooManyFailedError stops a run: more of one Run's rollouts failed than
// rollout.max_failed_fraction allows. Scoring the rest would train and
// evaluate on whatever the responder happened to answer.
type TooManyFailedError struct {
	Failed, Total int
	Max           float64
	Kinds         map[string]int // failed rollouts by error kind
	First         string         // the first failed rollout's error
}

func (e *TooManyFailedError) Error() string {
	kinds := make([]string, 0, len(e.Kinds))
	for k, n := range e.Kinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("%d of %d rollouts failed (%s), above rollout.max_failed_fraction %g; first error: %s",
		e.Failed, e.Total, strings.Join(kinds, ", "), e.Max, e.First)
}

// Is makes errors.Is(err, ErrTooManyFailed) true.
func (e *TooManyFailedError) Is(target error) bool { return target == ErrTooManyFailed }
