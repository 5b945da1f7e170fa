package retrieval

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestCursorSeekMatchesLinearScan checks block skipping against a plain
// scan of the uncompressed list, across block boundaries.
func TestCursorSeekMatchesLinearScan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	var tb []termBuilder
	var lists [][2][]uint32
	for _, n := range []int{1, 127, 128, 129, 1000} {
		var docs, tfs []uint32
		d := uint32(r.IntN(3))
		for range n {
			docs = append(docs, d)
			tfs = append(tfs, 1+uint32(r.IntN(300)))
			d += 1 + uint32(r.IntN(500))
		}
		var b termBuilder
		for i := range docs {
			b.add(docs[i], tfs[i])
		}
		tb = append(tb, b)
		lists = append(lists, [2][]uint32{docs, tfs})
	}
	p := flattenPostings(tb)
	if err := p.validate(math.MaxInt32); err != nil {
		t.Fatal(err)
	}
	for ti, l := range lists {
		docs, tfs := l[0], l[1]
		var c cursor
		c.init(p, uint32(ti))
		for i := range docs {
			if c.doc() != docs[i] || c.tf() != tfs[i] {
				t.Fatalf("term %d posting %d: got (%d,%d), want (%d,%d)", ti, i, c.doc(), c.tf(), docs[i], tfs[i])
			}
			c.next()
		}
		if c.doc() != math.MaxUint32 {
			t.Fatalf("term %d: not exhausted", ti)
		}
		c.init(p, uint32(ti))
		target := uint32(0)
		for c.doc() != math.MaxUint32 {
			target += uint32(r.IntN(3000))
			c.seek(target)
			want := uint32(math.MaxUint32)
			for _, d := range docs {
				if d >= target {
					want = d
					break
				}
			}
			if c.doc() != want {
				t.Fatalf("term %d seek %d: got %d, want %d", ti, target, c.doc(), want)
			}
		}
	}
}
