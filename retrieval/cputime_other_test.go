//go:build !unix

package retrieval

func processCPU() int64 { return -1 }
