//go:build !linux

package retrieval

func adviseRandom(mem []byte, off, n uint64) {}
