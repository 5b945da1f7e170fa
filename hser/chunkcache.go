package hser

import "sync"

// chunkCache keeps the normalized form of context chunks across calls: a
// GRPO step scores G answers against the same retrieved chunks, and the
// same passages come back step after step, so normalizing every chunk for
// every answer (the unicode tokenizer over a few hundred bytes) was most of
// Hit's cost. Keys are the chunk texts themselves, so a chunk whose text
// changes (another KB, a remote backend) is normalized again; the values
// depend only on the text and the scorer's configuration, so a cached entry
// gives the same bits as normalizing anew.
//
// The cache is bounded by the bytes it holds (keys and values): when an
// insert would pass maxBytes it is emptied and starts over, which keeps
// memory bounded without bookkeeping per entry; results never depend on
// what is cached.
type chunkCache struct {
	mu       sync.RWMutex
	m        map[string][]byte
	bytes    int
	maxBytes int
}

// defaultChunkCacheBytes bounds a scorer's chunk cache: about 32k chunks
// of 1 KiB (key and value).
const defaultChunkCacheBytes = 64 << 20

func (c *chunkCache) get(chunk string) ([]byte, bool) {
	c.mu.RLock()
	v, ok := c.m[chunk]
	c.mu.RUnlock()
	return v, ok
}

// put stores norm (which the cache now owns) for chunk.
func (c *chunkCache) put(chunk string, norm []byte) {
	size := len(chunk) + len(norm)
	if size > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[chunk]; ok {
		return
	}
	if c.m == nil || c.bytes+size > c.maxBytes {
		c.m, c.bytes = map[string][]byte{}, 0
	}
	c.m[chunk] = norm
	c.bytes += size
}

// len reports the number of cached chunks (for tests).
func (c *chunkCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
