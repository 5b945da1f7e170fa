package httpcall

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Policy is how calls are made: the per-call timeout and the retries.
type Policy struct {
	Timeout     time.Duration // one attempt, including queueing on the server
	Retries     int           // attempts after the first, for retryable failures
	BackoffBase time.Duration // first backoff; doubles per retry
	BackoffMax  time.Duration // ceiling of the backoff
}

// Failure kinds of a call. Callers record them (a rollout's error kind) and
// decide on them (a missing model stops a run).
const (
	KindTimeout     = "timeout"         // timed out on every attempt
	KindUnavailable = "unavailable"     // connection errors, 429, 503 or other 5xx on every attempt
	KindRejected    = "rejected"        // the server rejected the request (4xx other than 404)
	KindNotFound    = "model_not_found" // 404: the model is not on the host
	KindMalformed   = "malformed"       // a 200 whose body is not the documented response
)

// ModelNotFoundError is returned when a host answers 404 for the model.
// It is fatal for a run: no retry or later step can fix it.
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

// CallError is a call that failed after its retries.
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

// MalformedError is a 200 response whose body is not what the endpoint
// documents (undecodable JSON, a missing field). It is not retried: the
// server answered, and the same request would get the same answer.
type MalformedError struct {
	What string // e.g. "/api/chat response has no message"
}

func (e *MalformedError) Error() string { return "malformed response: " + e.What }

// retryable classifies one attempt: whether to retry it, and its kind if it is final.
func retryable(status int, err error) (retry bool, kind string) {
	var me *MalformedError
	if errors.As(err, &me) {
		return false, KindMalformed
	}
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
