//go:build !unix

package memory

func processCPU() int64 { return -1 }
