package retrieval

import (
	"fmt"
	"testing"
)

// TestTermDict checks that every term is found under its number, that
// other strings are not, and that a repeated term is refused.
func TestTermDict(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 12, 13, 1000, 49152} {
		terms := make([]string, n)
		for i := range terms {
			terms[i] = fmt.Sprintf("t%x", i*7919)
		}
		if n > 0 {
			terms[0] = "" // the empty string is a term like any other
		}
		d, err := newTermDict(terms)
		if err != nil {
			t.Fatal(err)
		}
		if d.len() != n || 4*n > 3*len(d.slots) {
			t.Fatalf("%d terms: len %d, %d slots", n, d.len(), len(d.slots))
		}
		for i, s := range terms {
			if got, ok := d.lookup(s); !ok || got != uint32(i) || d.term(got) != s {
				t.Fatalf("%d terms: lookup(%q) = %d, %v; want %d", n, s, got, ok, i)
			}
			if _, ok := d.lookup(s + "x"); ok {
				t.Fatalf("%d terms: found %q", n, s+"x")
			}
		}
	}
	if _, err := newTermDict([]string{"a", "b", "a"}); err == nil {
		t.Fatal("a repeated term was accepted")
	}
}

// TestTermLookupAllocates checks that looking up a token held as bytes,
// as SearchText does, allocates nothing.
func TestTermLookupAllocates(t *testing.T) {
	ix, err := BuildIndex([]string{"a", "b"}, []string{"alpha beta", "beta gamma"}, BM25Params{K1: 0.9, B: 0.4})
	if err != nil {
		t.Fatal(err)
	}
	tok := []byte("gamma")
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := ix.termID(string(tok)); !ok {
			t.Fatal("gamma not found")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per lookup", n)
	}
}
