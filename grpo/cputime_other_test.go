//go:build !linux

package grpo

import "time"

func threadCPU() (time.Duration, bool) { return 0, false }
