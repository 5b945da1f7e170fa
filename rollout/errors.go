package rollout

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/himes-rl/himes/internal/httpcall"
)

// Error kinds recorded in Record.ErrorKind. A rollout that fails is recorded
// with its kind and excluded from scoring and from advantages. The kinds of a
// failed HTTP call come from internal/httpcall.
const (
	KindRetrieval   = "retrieval" // the retriever failed
	KindResponder   = "responder" // anything else the responder returned
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
