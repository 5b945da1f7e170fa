package embedded

import (
	"encoding/binary"
	"math"
	"sync"

	"gonum.org/v1/gonum/mat"
)

// candCacheSize bounds each generation of the candidate cache: a GRPO step
// touches at most max_prompts distinct prompts, and an SFT epoch's prompts
// are each seen once per request, so two generations of 4096 hold a step's
// prompts between its sampling and its update with room to spare.
const candCacheSize = 4096

// prepared is a prompt's candidate terms, whether the cap cut any off, and
// their design matrix. Read-only once made: every sample of the prompt
// (sampling, logprobs, the update) shares it.
type prepared struct {
	cands     []candidate
	truncated bool
	phi       *mat.Dense
}

// candCache memoizes candidates (and design) per prompt and candidate cap.
// Candidate extraction, with its co-occurrence look-ups, is the bulk of the
// policy's work, and a step asks for the same prompt's candidates G times
// when sampling and G times again in the update. The value depends only on
// the prompt, the fixed term statistics and the cap, so a cached entry is
// exactly what a recomputation gives: results do not depend on the cache.
// Two generations bound its memory: when the current one is full it becomes
// the previous one and the old previous one is dropped.
type candCache struct {
	mu        sync.Mutex
	cur, prev map[candKey]*prepared
}

// candKey is the prompt's context, serialized with length prefixes (so no
// two contexts share a key), and the cap. A full key rather than a hash: a
// collision would hand one prompt another's candidates, silently.
type candKey struct {
	context string
	limit   int
}

func newCandCache() *candCache {
	return &candCache{cur: map[candKey]*prepared{}}
}

// get returns the prepared candidates of c under limit, computing them once.
func (cc *candCache) get(c rewriteContext, stats TermStats, limit int) *prepared {
	k := keyOf(c, limit)
	cc.mu.Lock()
	if p, ok := cc.cur[k]; ok {
		cc.mu.Unlock()
		return p
	}
	if p, ok := cc.prev[k]; ok {
		cc.cur[k] = p
		cc.mu.Unlock()
		return p
	}
	cc.mu.Unlock()
	// Computed outside the lock: two goroutines may both compute the same
	// prompt, and either result is the same value.
	cands, truncated := candidates(c, stats, limit)
	p := &prepared{cands: cands, truncated: truncated, phi: design(cands)}
	cc.mu.Lock()
	if len(cc.cur) >= candCacheSize {
		cc.prev, cc.cur = cc.cur, map[candKey]*prepared{}
	}
	cc.cur[k] = p
	cc.mu.Unlock()
	return p
}

// keyOf serializes everything candidates reads from c: each history
// message's role and text, the question, and each memory's id, text and
// score.
func keyOf(c rewriteContext, limit int) candKey {
	size := 16 + len(c.question)
	for _, m := range c.history {
		size += 16 + len(m.Role) + len(m.Content)
	}
	for _, m := range c.memories {
		size += 24 + len(m.ID) + len(m.Text)
	}
	b := make([]byte, 0, size)
	str := func(s string) {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(len(c.history)))
	for _, m := range c.history {
		str(m.Role)
		str(m.Content)
	}
	str(c.question)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(c.memories)))
	for _, m := range c.memories {
		str(m.ID)
		str(m.Text)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(m.Score))
	}
	return candKey{context: string(b), limit: limit}
}
