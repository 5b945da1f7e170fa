//go:build !linux

package atomicfile

import "errors"

// exchange is not available here: ReplaceDir moves the old directory aside.
func exchange(a, b string) error { return errors.ErrUnsupported }
