//go:build linux

package retrieval

import (
	"os"
	"syscall"
)

// adviseRandom turns off read-ahead for a mapped range read at random (the
// document store, ids): a page fault would otherwise read ≈ 128 KiB around
// every fetched text, and resident memory would follow the file, not the
// queries.
func adviseRandom(mem []byte, off, n uint64) {
	page := uint64(os.Getpagesize())
	lo := off &^ (page - 1)
	if n == 0 || off+n > uint64(len(mem)) {
		return
	}
	_ = syscall.Madvise(mem[lo:off+n], syscall.MADV_RANDOM) // advice only
}
