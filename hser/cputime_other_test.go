//go:build !linux

package hser

import "time"

func threadCPU() (time.Duration, bool) { return 0, false }
