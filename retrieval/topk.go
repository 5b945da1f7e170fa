package retrieval

// hitOrder is a ranking order: score descending, ties by document number
// descending (trec_eval's order, and this index's: documents are numbered
// by ascending id) or ascending (Lucene's). tie is the sign the document
// numbers are compared under: +1 descending, -1 ascending (no branch in
// the comparison every offered hit goes through).
type hitOrder struct{ tie int }

var (
	scoreDocDesc = hitOrder{tie: 1}  // Index.Search, DenseIndex.Search, RRF
	scoreDocAsc  = hitOrder{tie: -1} // scoring "lucene" (Anserini's order)
)

// better reports whether a ranks above b.
func (o hitOrder) better(a, b Hit) bool {
	return a.Score > b.Score || a.Score == b.Score && a.Doc*o.tie > b.Doc*o.tie
}

// compare orders hits best first, for slices.SortFunc.
func (o hitOrder) compare(a, b Hit) int {
	switch {
	case o.better(a, b):
		return -1
	case o.better(b, a):
		return 1
	}
	return 0
}

// topK keeps the k best hits offered, in a min-heap (the worst kept hit on
// top) written out here rather than through container/heap, whose
// interface boxes every Hit. It is the one top-k selection of every search.
type topK struct {
	order hitOrder
	k     int
	h     []Hit
}

// reset empties t for a search of k hits, reusing buf's storage.
func (t *topK) reset(order hitOrder, k int, buf []Hit) {
	t.order, t.k, t.h = order, k, buf[:0]
}

// full reports whether t holds k hits: a hit must then beat worst().
func (t *topK) full() bool { return len(t.h) == t.k }

// worst is the lowest kept hit (t must not be empty).
func (t *topK) worst() Hit { return t.h[0] }

// accepts reports whether push would keep hit: t is not full, or hit ranks
// above the worst kept hit. It is small enough to be inlined, so the common
// case of a search (a full t and a hit that does not make it) costs one
// comparison and no call.
func (t *topK) accepts(hit Hit) bool {
	return len(t.h) < t.k || t.order.better(hit, t.h[0])
}

// push keeps a hit t accepts, replacing the worst kept hit when t is full.
func (t *topK) push(hit Hit) {
	if len(t.h) < t.k {
		t.h = append(t.h, hit)
		t.order.up(t.h, len(t.h)-1)
		return
	}
	t.h[0] = hit
	t.order.down(t.h, 0)
}

// sorted drains t into a new slice, best first, and returns the emptied
// storage for reuse.
func (t *topK) sorted() (out, buf []Hit) {
	h := t.h
	out = make([]Hit, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		out[i] = h[0]
		h[0] = h[len(h)-1]
		h = h[:len(h)-1]
		t.order.down(h, 0)
	}
	t.h = h
	return out, h
}

// up and down restore the min-heap property of h (worst on top) after h[i]
// changed.
func (o hitOrder) up(h []Hit, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !o.better(h[p], h[i]) {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
}

func (o hitOrder) down(h []Hit, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && o.better(h[l], h[r]) {
			m = r
		}
		if !o.better(h[i], h[m]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
