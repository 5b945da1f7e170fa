package rollout

import (
	"context"
	"errors"

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
