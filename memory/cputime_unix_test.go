//go:build unix

package memory

import "syscall"

// processCPU is the process's user+system CPU time in nanoseconds: on a
// shared machine it measures the work of a benchmark where wall time also
// counts the waits for a core.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
