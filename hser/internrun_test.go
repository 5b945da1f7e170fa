package hser

import (
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"unsafe"
)

// runCase is one internRun input: the scanned tokens of a random text and
// a table already holding some keys (of this generation and stale ones).
type runCase struct {
	text  []byte
	tok   []scanToken
	tab   internTable
	nk    int
	outW  int
	label string
}

// randomRunCase builds a text of words of 1–20 bytes (most under 11) (letters of both
// cases, digits), separated by spaces or by punctuation (which makes
// fields of several tokens), scans it, and interns a random prefix of its
// tokens the ordinary way so that the table holds live keys; a small table
// makes first-probe collisions common.
func randomRunCase(r *rand.Rand) runCase {
	const alpha = "abcdeABCDE0189xyzXYZ"
	var sb strings.Builder
	words := 1 + r.IntN(120)
	vocab := 1 + r.IntN(30)
	for i := range words {
		if i > 0 {
			switch r.IntN(16) {
			case 0:
				sb.WriteString("-")
			case 1:
				sb.WriteString(", ")
			default:
				sb.WriteString(" ")
			}
		}
		// A word drawn from a small vocabulary, so that tokens repeat.
		wr := rand.New(rand.NewPCG(uint64(r.IntN(vocab)), 7))
		n := 1 + wr.IntN(10)
		if wr.IntN(10) == 0 {
			n += 10 // some over maxPacked
		}
		for range n {
			sb.WriteByte(alpha[wr.IntN(len(alpha))])
		}
	}
	c := runCase{label: sb.String()}
	c.text = padText([]byte(c.label))
	var a asciiScan
	tokens, _, _ := a.scan(c.text)
	c.tok = slices.Clone(a.tok[:tokens])
	if tokens > 0 {
		c.tok[0].field |= 1 // a side starts a field (internTokens)
	}
	for i := range c.tok {
		if r.IntN(20) == 0 {
			c.tok[i].field |= xField
		}
	}
	// reset gives at least 2 slots per token; a table of 2 has many
	// first-probe collisions, one of 8 few.
	c.tab.reset((tokens + articleIDs) * (1 + r.IntN(4)))
	if r.IntN(3) == 0 {
		c.tab.reset(tokens + articleIDs) // a second generation: the first one's slots are stale
	}
	c.tab.seedArticles()
	// A prefix interned the ordinary way (each token on its own).
	pre := r.IntN(tokens + 1)
	buf := make([]byte, 0, len(c.text)+64)
	for _, tk := range c.tok[:pre] {
		if tk.end-tk.start > maxPacked {
			continue
		}
		var w int
		_, w = c.tab.internSlow(c.text, buf[:cap(buf)], len(buf), &tk)
		buf = buf[:w]
	}
	c.nk = len(c.tab.keys)
	c.outW = len(buf)
	return c
}

// runOnce runs f on a copy of c's mutable state and returns everything it
// wrote.
func runOnce(c *runCase, from int, f func(tok []scanToken, full, out []byte, w int, slots []internSlot, shift uint, gen uint32, keys []span, nk int, idv, sqv []int32, ns int) (int, int, int, int)) (res [4]int, out []byte, slots []internSlot, keys []span, idv, sqv []int32) {
	tok := c.tok[from:]
	out = make([]byte, c.outW+len(c.text)+2*maxPacked)
	slots = slices.Clone(c.tab.slots)
	keys = make([]span, c.nk+len(tok)+1)
	copy(keys, c.tab.keys)
	idv = make([]int32, len(tok)+1)
	sqv = make([]int32, 5+len(tok))
	full := c.text[:cap(c.text)]
	d, w, nk, ns := f(tok, full, out, c.outW, slots, c.tab.shift, c.tab.gen<<8, keys, c.nk, idv, sqv, 5)
	return [4]int{d, w, nk, ns}, out, slots, keys[:nk], idv[:d], sqv[:ns]
}

// TestInternRunMatchesGo: the architecture's internRun (assembly on amd64)
// writes exactly what the Go loop writes, on random texts and tables:
// tokens taken, out bytes, slots, keys, ids and SQuAD ids. On other
// architectures internRunArch is the Go loop and the test checks the
// wrapper's bounds.
func TestInternRunMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	taken, stopped := 0, 0
	for i := range 3000 {
		c := randomRunCase(r)
		if len(c.tok) == 0 {
			continue
		}
		from := r.IntN(len(c.tok))
		c.tok[from].field |= 1 // a call starts at an ordinary token or stops at once
		gr, gout, gslots, gkeys, gidv, gsqv := runOnce(&c, from, internRunGo)
		ar, aout, aslots, akeys, aidv, asqv := runOnce(&c, from, internRun)
		switch {
		case gr != ar:
			t.Fatalf("case %d %q from %d: (done, w, nk, ns) = %v, Go loop %v", i, c.label, from, ar, gr)
		case !slices.Equal(gout, aout):
			t.Fatalf("case %d %q: out bytes differ", i, c.label)
		case !slices.Equal(gslots, aslots):
			t.Fatalf("case %d %q: slots differ", i, c.label)
		case !slices.Equal(gkeys, akeys), !slices.Equal(gidv, aidv), !slices.Equal(gsqv, asqv):
			t.Fatalf("case %d %q: keys, ids or SQuAD ids differ", i, c.label)
		}
		taken += gr[0]
		if gr[0] < len(c.tok)-from {
			stopped++
		}
	}
	// The cases exercise both the loop and each way out of it.
	if taken < 10000 || stopped < 500 {
		t.Fatalf("weak cases: %d tokens taken, %d runs stopped early", taken, stopped)
	}
}

// TestInternRunStopsWhereDocumented: a hand-made table and token list;
// the loop takes ordinary tokens and stops at a field continuation, a
// token over maxPacked bytes, an xfield mark and a colliding key.
func TestInternRunStopsWhereDocumented(t *testing.T) {
	text := padText([]byte("The cat sat on the mat and-so a verylongwordofseventeen"))
	var a asciiScan
	n, _, _ := a.scan(text)
	tok := a.tok[:n]
	tok[0].field |= 1
	var tab internTable
	tab.reset(64)
	tab.seedArticles()
	run := func(from int) (int, []int32) {
		keys := make([]span, len(tab.keys)+n)
		copy(keys, tab.keys)
		idv := make([]int32, n)
		sqv := make([]int32, n)
		out := make([]byte, len(text)+2*maxPacked)
		d, _, nk, ns := internRun(tok[from:], text[:cap(text)], out, 0, tab.slots, tab.shift, tab.gen<<8, keys, len(tab.keys), idv, sqv, 0)
		tab.keys = keys[:nk]
		return d, sqv[:ns]
	}
	// the cat sat on the mat and | so (continues "and-") ...
	d, sq := run(0)
	if d != 7 {
		t.Fatalf("took %d tokens, want 7 (up to the field continuation \"so\")", d)
	}
	// "the" is the seeded article id 2, left out of the SQuAD ids; "cat" is
	// the first new key.
	want := []int32{articleIDs, articleIDs + 1, articleIDs + 2, articleIDs + 3, articleIDs + 4}
	if !slices.Equal(sq, want) {
		t.Fatalf("SQuAD ids %v, want %v", sq, want)
	}
	if d, _ := run(8); d != 1 { // "a" (an article, seeded), then the 17-byte word
		t.Fatalf("took %d tokens from \"a\", want 1 (the long word stops it)", d)
	}
	tok[1].field |= xField
	if d, _ := run(0); d != 1 {
		t.Fatalf("took %d tokens, want 1 (an xfield mark on the second)", d)
	}
}

// TestScanMatchesGo: the architecture's scan (SSE2 assembly on amd64)
// finds exactly the tokens scanGo finds — starts, ends, whitespace flags —
// and the same ASCII and control verdicts, on random texts of 0–300 bytes
// over letters, digits, spaces, punctuation, control characters, 0x7f and
// non-ASCII bytes, in every position of a 64-byte block.
func TestScanMatchesGo(t *testing.T) {
	if unsafe.Sizeof(scanToken{}) != 12 {
		t.Fatalf("scanToken is %d bytes; the assembly writes 12-byte tokens", unsafe.Sizeof(scanToken{}))
	}
	r := rand.New(rand.NewPCG(3, 4))
	classes := []string{
		"abcxyzABCXYZ019@[`{/:", // letters, digits and their neighbours
		"  \t\n",
		".,-'!?\"()",
		"\x00\x01\x1b\x1f\x7f",
		"\x80\xc3\xa9\xff",
	}
	var ga, aa asciiScan
	seen := map[[2]bool]int{}
	for i := range 20000 {
		n := r.IntN(301)
		// Most texts only of the first three classes (ASCII, no control).
		maxClass := 3
		if r.IntN(4) == 0 {
			maxClass = len(classes)
		}
		text := make([]byte, n)
		for j := range text {
			c := classes[r.IntN(maxClass)]
			if r.IntN(3) > 0 {
				c = classes[0]
			}
			text[j] = c[r.IntN(len(c))]
		}
		text = padText(text)
		gk, gAscii, gCtl := ga.scanGo(text)
		ak, aAscii, aCtl := aa.scan(text)
		if gAscii != aAscii || (gAscii && (gk != ak || gCtl != aCtl)) {
			t.Fatalf("case %d %q: scan (%d, %v, %v), scanGo (%d, %v, %v)", i, text, ak, aAscii, aCtl, gk, gAscii, gCtl)
		}
		if gAscii && !slices.Equal(ga.tok[:gk], aa.tok[:ak]) {
			t.Fatalf("case %d %q: tokens differ:\n%v\n%v", i, text, aa.tok[:ak], ga.tok[:gk])
		}
		seen[[2]bool{gAscii, gCtl}]++
	}
	// Every verdict was exercised.
	for _, v := range [][2]bool{{true, false}, {true, true}, {false, false}} {
		if seen[v] < 100 {
			t.Fatalf("only %d texts with (ascii, control) = %v", seen[v], v)
		}
	}
}

// tokensBefore is the first index whose token starts at or after at, as
// sort.Search finds it, on sorted starts with repeats and on every at
// around them.
func TestTokensBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	for range 2000 {
		tok := make([]scanToken, rng.IntN(40))
		s := int32(0)
		for i := range tok {
			s += int32(rng.IntN(4))
			tok[i].start = s
		}
		for at := int32(-1); at <= s+2; at++ {
			want := sort.Search(len(tok), func(i int) bool { return tok[i].start >= at })
			if got := tokensBefore(tok, at); got != want {
				t.Fatalf("starts %v, at %d: %d, want %d", tok, at, got, want)
			}
		}
	}
}
