// Package fielderr carries the dotted path of an invalid config field, so the
// config loader can point at the exact key (and its YAML line) that is wrong.
package fielderr

import (
	"errors"
	"fmt"
	"math"
)

// Error is a validation failure for one config field.
type Error struct {
	Field string // dotted path relative to the struct that reported it
	Msg   string
}

func (e *Error) Error() string { return e.Field + ": " + e.Msg }

// New returns a field error with a formatted message.
func New(field, format string, args ...any) error {
	return &Error{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Prefix nests a field error under a parent section ("grpo" + "group_size" →
// "grpo.group_size"). Other errors are returned with the section as context.
func Prefix(section string, err error) error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) {
		return &Error{Field: section + "." + fe.Field, Msg: fe.Msg}
	}
	return fmt.Errorf("%s: %w", section, err)
}

// Seconds checks a duration in seconds that must be finite and positive
// (a timeout): 0, a negative value, NaN and ±Inf are refused.
func Seconds(field string, v float64) error {
	if !(v > 0) || math.IsInf(v, 0) {
		return New(field, "must be > 0, got %v", v)
	}
	return nil
}
