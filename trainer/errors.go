package trainer

import (
	"fmt"
	"net/http"
)

// Error codes of the protocol (PROTOCOL.md, "Errors").
const (
	CodeInvalidArgument = "invalid_argument"
	CodeUnknownLossType = "unknown_loss_type"
	CodeUnauthorized    = "unauthorized"
	CodeNotFound        = "not_found"
	CodeConflict        = "conflict"
	// CodeVersionMismatch: the policy is not at the request's
	// expected_policy_version (the trainer restarted, or another client
	// changed it); nothing was applied.
	CodeVersionMismatch = "version_mismatch"
	// CodeRunMismatch: load's checkpoint was saved by another run
	// (expected_run_id); the policy is unchanged.
	CodeRunMismatch = "run_mismatch"
	// CodeCheckpointCorrupt: a checkpoint fails its checksum or validation;
	// the policy is unchanged.
	CodeCheckpointCorrupt = "checkpoint_corrupt"
	CodeOOM               = "oom"
	CodeInternal          = "internal"
	CodeUnavailable       = "unavailable"
)

// Error is a protocol error: what an endpoint answers, and what the client
// returns (wrapped with the endpoint and the call) when an endpoint refuses.
type Error struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	// Status is the HTTP status; 0 means the default for Code.
	Status int `json:"-"`
	// cause is the field error behind a refused loss value (LossConfig.Resolve).
	cause error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the field error behind the error, if any.
func (e *Error) Unwrap() error { return e.cause }

// HTTPStatus is the status an endpoint answers for the error.
func (e *Error) HTTPStatus() int {
	if e.Status != 0 {
		return e.Status
	}
	switch e.Code {
	case CodeInvalidArgument, CodeUnknownLossType:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict:
		return http.StatusConflict
	case CodeVersionMismatch, CodeRunMismatch:
		return http.StatusPreconditionFailed
	case CodeOOM:
		return http.StatusInsufficientStorage
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// NewError is a protocol error with the code's default status; only
// unavailable is retryable.
func NewError(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: code == CodeUnavailable}
}

// Invalidf is an invalid_argument error (400): the message names the field.
func Invalidf(format string, args ...any) *Error {
	return NewError(CodeInvalidArgument, format, args...)
}
