package hser

import (
	"fmt"
	"testing"
)

// TestChunkCache: Hit reads normalized chunks from the scorer's cache; the
// answers must be those of normalizing anew, per scorer configuration, and
// the cache must stay within its byte bound.
func TestChunkCache(t *testing.T) {
	chunk := "In 2,000 years the population reached 2000 people."
	// SQuAD's normalization deletes the comma ("2000 years"); the unicode
	// tokens split at it ("2 000 years"). A cache shared across
	// configurations would answer one of them wrongly.
	uni, rs := mustScorer(t, DefaultConfig()), mustScorer(t, rougeCfg(false))
	for round := range 3 { // the first round fills the caches, the others read them
		for _, c := range []struct {
			s         *Scorer
			name      string
			pred      string
			hit, size float64
		}{
			{uni, "unicode", "2 000 years", 1, 1},
			{uni, "unicode", "2000 years", 0, 1},
			{rs, "rouge-score", "2000 years", 1, 1},
			{rs, "rouge-score", "2 000 years", 0, 1},
		} {
			if g := c.s.Score(c.pred, "x", []string{chunk}); g.Hit != c.hit {
				t.Errorf("round %d, %s: hit(%q) = %v, want %v", round, c.name, c.pred, g.Hit, c.hit)
			}
			if n := c.s.chunks.len(); float64(n) != c.size {
				t.Errorf("round %d, %s: %d cached chunks, want %v", round, c.name, n, c.size)
			}
		}
	}

	// A chunk that differs by one character is its own entry.
	if g := uni.Score("2 000 years", "x", []string{chunk[:len(chunk)-1] + "!"}); g.Hit != 1 || uni.chunks.len() != 2 {
		t.Errorf("changed chunk: hit %v with %d cached, want 1 with 2", g.Hit, uni.chunks.len())
	}

	// Bounded: 100-byte chunks (key and value about 190 bytes) in a 1000-byte
	// cache; it empties itself instead of growing, and Hit stays right.
	small := mustScorer(t, DefaultConfig())
	small.chunks.maxBytes = 1000
	for i := range 50 {
		c := fmt.Sprintf("passage %04d %s", i, "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut")
		for range 2 {
			if g := small.Score(fmt.Sprintf("passage %04d", i), "x", []string{c}); g.Hit != 1 {
				t.Fatalf("bounded cache, chunk %d: hit %v, want 1", i, g.Hit)
			}
		}
		if g := small.Score(fmt.Sprintf("passage %04d", i+1), "x", []string{c}); g.Hit != 0 {
			t.Fatalf("bounded cache, chunk %d: hit of the next passage's number %v, want 0", i, g.Hit)
		}
		if small.chunks.bytes > 1000 {
			t.Fatalf("bounded cache holds %d bytes, bound 1000", small.chunks.bytes)
		}
	}
	if n := small.chunks.len(); n < 1 || n > 1000/150 {
		t.Errorf("bounded cache holds %d chunks, want 1..%d", n, 1000/150)
	}
	// A chunk larger than the whole cache is never stored.
	big := make([]byte, 2000)
	for i := range big {
		big[i] = 'a' + byte(i%26)
		if i%7 == 6 {
			big[i] = ' '
		}
	}
	small.Score("abcdef", "x", []string{string(big)})
	if _, ok := small.chunks.get(string(big)); ok {
		t.Error("a chunk over the cache's bound was stored")
	}
}
