//go:build amd64 && !purego

package hser

// internRunASM is internRunGo in assembly (internrun_amd64.s), on the
// slices' first elements; internRun checks the bounds it relies on.
//
//go:noescape
func internRunASM(tok *scanToken, n int, text, out *byte, w int, slots *internSlot, shift uint, gen uint32, keys *span, nk int, idv, sqv *int32, ns int, masks *[2][maxPacked + 1]uint64) (done, w2, nk2, ns2 int)

// internRun: see internRunGo. On amd64 it is assembly: Go's register
// allocator spills most of this loop's fifteen live values, and the loop
// is a third of a score's time. arch_other.go has the same three lines
// around the Go loop: sharing them behind one more call (which Go does
// not inline) cost groups of scores 2–3%.
func internRun(tok []scanToken, full, out []byte, w int, slots []internSlot, shift uint, gen uint32, keys []span, nk int, idv, sqv []int32, ns int) (done, w2, nk2, ns2 int) {
	if len(tok) == 0 {
		return 0, w, nk, ns
	}
	checkRun(tok, full, out, w, slots, shift, keys, nk, idv, sqv, ns)
	return internRunASM(&tok[0], len(tok), &full[0], &out[0], w, &slots[0], shift, gen, &keys[0], nk, &idv[0], &sqv[0], ns, &packMaskSplit)
}

// packMaskSplit is packMaskTab as two arrays, lo's masks then hi's, so
// that the assembly indexes both by n with a scale of 8.
var packMaskSplit = func() (t [2][maxPacked + 1]uint64) {
	for n := range maxPacked + 1 {
		t[0][n], t[1][n] = packMaskTab[n][0], packMaskTab[n][1]
	}
	return t
}()

// scanASM is scanGo in assembly (scan_amd64.s) over blocks 64-byte blocks
// of text; scan checks the bounds it relies on.
//
//go:noescape
func scanASM(text *byte, blocks int, tok *scanToken, consts *[7][16]byte) (startBytes, endBytes int, flags uint64)

// scanConsts are scanASM's byte constants, each in all 16 bytes of its row.
var scanConsts = func() (c [7][16]byte) {
	for i, b := range [7]byte{0x50, 0x8a, 0x20, 0x1f, 0x9a, 0x01, 0x21} {
		for j := range c[i] {
			c[i][j] = b
		}
	}
	return c
}()

// scan: see scanGo.
func (a *asciiScan) scan(text []byte) (tokens int, ascii, control bool) {
	n := len(text)
	full := text[:n+textSlack]   // blocks*64 ≤ n+64 bytes are read
	a.tok = resize(a.tok, n/2+1) // tokens are separated by at least one byte
	starts, _, flags := scanASM(&full[0], n/64+1, &a.tok[0], &scanConsts)
	if flags&1 != 0 {
		return 0, false, false
	}
	return starts / 12, true, flags&2 != 0
}
