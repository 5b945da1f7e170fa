//go:build !amd64 || purego

package hser

// internRun: see internRunGo.
func internRun(tok []scanToken, full, out []byte, w int, slots []internSlot, shift uint, gen uint32, keys []span, nk int, idv, sqv []int32, ns int) (done, w2, nk2, ns2 int) {
	if len(tok) == 0 {
		return 0, w, nk, ns
	}
	checkRun(tok, full, out, w, slots, shift, keys, nk, idv, sqv, ns)
	return internRunGo(tok, full, out, w, slots, shift, gen, keys, nk, idv, sqv, ns)
}

// scan: see scanGo.
func (a *asciiScan) scan(text []byte) (tokens int, ascii, control bool) {
	return a.scanGo(text)
}
