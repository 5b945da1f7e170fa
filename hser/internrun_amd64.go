//go:build amd64 && !purego

package hser

// internRunASM is internRunGo in assembly (internrun_amd64.s), on the
// slices' first elements; internRun checks the bounds it relies on.
//
//go:noescape
func internRunASM(tok *scanToken, n int, text, out *byte, w int, slots *internSlot, shift uint, gen uint32, keys *span, nk int, idv, sqv *int32, ns int, masks *[2][maxPacked + 1]uint64) (done, w2, nk2, ns2 int)

// internRun: see internRunGo. On amd64 it is assembly: Go's register
// allocator spills most of this loop's fifteen live values, and the loop
// is a third of a score's time.
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
