package rollout

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
)

// Error kinds recorded in Record.ErrorKind. A rollout that fails is recorded
// with its kind and excluded from scoring and from advantages.
const (
	KindRetrieval   = "retrieval"       // the retriever failed
	KindTimeout     = "timeout"         // the responder call timed out on every attempt
	KindUnavailable = "unavailable"     // connection errors, 503 busy or other 5xx on every attempt
	KindRejected    = "rejected"        // the server rejected the request (4xx other than 404)
	KindNotFound    = "model_not_found" // 404: the model is not on the host (fatal for the run)
	KindResponder   = "responder"       // anything else the responder returned
)

// ModelNotFoundError is returned when a host answers 404 for the model.
// It is fatal: no retry or later step can fix it.
type ModelNotFoundError struct {
	Model, Host string
	// Hint is the command that fixes it, e.g. "ollama pull llama3".
	Hint string
}

func (e *ModelNotFoundError) Error() string {
	if e.Hint != "" {
		return fmt.Sprintf("model %s not found on host %s — run `%s`", e.Model, e.Host, e.Hint)
	}
	return fmt.Sprintf("model %s not found on host %s", e.Model, e.Host)
}

// CallError is a responder call that failed after its retries.
type CallError struct {
	Kind     string // one of the Kind constants
	Host     string
	Status   int // HTTP status of the last attempt; 0 when there was no response
	Attempts int
	Err      error // the last attempt's error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("%s: %s after %d attempt(s): %v", e.Host, e.Kind, e.Attempts, e.Err)
}

func (e *CallError) Unwrap() error { return e.Err }

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

// retryable classifies one attempt: whether to retry it, and its kind if it is final.
func retryable(status int, err error) (retry bool, kind string) {
	if err != nil {
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			return true, KindTimeout
		}
		// Connection refused/reset, EOF mid-response, DNS: transport errors
		// all leave no status and are worth another attempt.
		return true, KindUnavailable
	}
	switch {
	case status == http.StatusNotFound:
		return false, KindNotFound
	case status == http.StatusTooManyRequests, status == http.StatusRequestTimeout:
		return true, KindUnavailable
	case status >= 500:
		return true, KindUnavailable
	case status >= 400:
		return false, KindRejected
	}
	return false, ""
}
