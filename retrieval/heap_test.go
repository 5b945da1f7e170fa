package retrieval

import (
	"runtime"
	"testing"

	"github.com/himes-rl/himes/retrieval/corpus"
)

// TestIndexHeap bounds the live heap of an in-memory index built from a
// small generated KB (4,000 passages, about the shared KB's size), as the
// bench's "index heap" counts it: HeapAlloc after a GC with the index,
// less before it, the texts and ids excluded. The bound is computed from
// the index's counts, not its structures, with room to spare (the index
// takes ≈ 3/4 of it): 9 bytes a posting (a compressed posting takes ≈ 2–3
// and its decoded impact 4), 48 a term (its bytes, offset, hash slot and
// posting tables: ≈ 40), 48 a document (id header, length, norm: 28) and
// 128 KiB. The index this replaced (12-byte impacts, a map and a []string
// for the vocabulary, float64 idf and bounds per term) took 1.8 times it.
func TestIndexHeap(t *testing.T) {
	ids, texts := corpus.Zipf(3, 4000, 50000, 100, 1.07)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ix, err := BuildIndex(ids, texts, BM25Params{K1: 0.9, B: 0.4})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	np, nt, nd := ix.NumPostings(), ix.NumTerms(), ix.Len()
	limit := int64(9*np + 48*nt + 48*nd + 128<<10)
	t.Logf("heap %d bytes for %d postings, %d terms, %d documents: %.2f of the bound %d", heap, np, nt, nd, float64(heap)/float64(limit), limit)
	if ix.impOff == nil {
		t.Fatal("the index keeps no decoded impacts")
	}
	if heap > limit {
		t.Fatalf("index heap %d bytes, above the bound %d", heap, limit)
	}
	runtime.KeepAlive(ix)
	runtime.KeepAlive(texts)
}
