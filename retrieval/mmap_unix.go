//go:build unix

package retrieval

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps a file read-only: pages are read from disk when a search
// first touches them and may be dropped again by the kernel, so resident
// memory follows what queries use, not the file's size.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	if size == 0 {
		return nil, func() error { return nil }, nil
	}
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("mmap: file of %d bytes does not fit the address space", size)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	return b, func() error { return syscall.Munmap(b) }, nil
}
