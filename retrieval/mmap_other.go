//go:build !unix

package retrieval

import (
	"io"
	"os"
)

// mapFile reads the whole file where memory mapping is not available: the
// index works the same, but resident memory is the file's size.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, nil, err
	}
	return b, func() error { return nil }, nil
}
