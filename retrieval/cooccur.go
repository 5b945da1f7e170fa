package retrieval

import "math"

// CoDF is the number of documents that contain both analyzed terms a and b
// (DF(a) when a == b, 0 when either is not in the index). It intersects the
// two posting lists, leapfrogging with seeks, so it costs about the shorter
// list's length in seeks. The embedded rewriter uses it for the association
// of a history term with the question's terms.
func (ix *Index) CoDF(a, b string) int {
	ta, ok := ix.termID(a)
	if !ok {
		return 0
	}
	tb, ok := ix.termID(b)
	if !ok {
		return 0
	}
	if ta == tb {
		return int(ix.post.df[ta])
	}
	if ix.post.df[ta] > ix.post.df[tb] {
		ta, tb = tb, ta // drive the intersection with the shorter list
	}
	var ca, cb cursor
	ca.init(ix.post, ta)
	cb.init(ix.post, tb)
	n := 0
	for d := ca.doc(); d != math.MaxUint32; d = ca.doc() {
		cb.seek(d)
		e := cb.doc()
		if e == math.MaxUint32 {
			break
		}
		if e == d {
			n++
			ca.next()
			continue
		}
		ca.seek(e)
	}
	return n
}

// DF is the number of KB documents containing an analyzed term.
func (p *Pipeline) DF(term string) int { return p.bm25.DF(term) }

// CoDF is Index.CoDF on the KB's index.
func (p *Pipeline) CoDF(a, b string) int { return p.bm25.CoDF(a, b) }

// NumDocs is the number of documents (chunks) in the KB's index.
func (p *Pipeline) NumDocs() int { return p.bm25.Len() }
