package hser

import "math/bits"

// lcsBits returns the length of the longest common subsequence of a and b,
// sequences of token ids in [0, k), with the bit-parallel algorithm of
// Allison–Dix / Crochemore et al. (as analysed by Hyyrö, 2004): one bit per
// position of a, one pass over b, ⌈len(a)/64⌉ word operations per token of
// b. peq and v are scratch and are returned for reuse.
//
// For each b[j], with M = the positions of a holding b[j]:
//
//	V ← (V + (V & M)) | (V & ¬M)
//
// starting from all ones; the LCS length is the number of zero bits among the
// first len(a) bits of V.
func lcsBits(a, b []int32, k int, peq, v []uint64) (int, []uint64, []uint64) {
	if len(a) == 0 || len(b) == 0 {
		return 0, peq, v
	}
	if len(a) > len(b) { // fewer words per step
		a, b = b, a
	}
	w := (len(a) + 63) / 64
	peq = resize(peq, k*w)
	clear(peq)
	for i, id := range a {
		peq[int(id)*w+i/64] |= 1 << (uint(i) % 64)
	}
	v = resize(v, w)
	for i := range v {
		v[i] = ^uint64(0)
	}
	if w == 1 {
		x := v[0]
		for _, id := range b {
			m := peq[id]
			x = (x + (x & m)) | (x &^ m)
		}
		v[0] = x
	} else {
		for _, id := range b {
			m := peq[int(id)*w : int(id)*w+w]
			var carry uint64
			for i := range v {
				var sum uint64
				sum, carry = bits.Add64(v[i], v[i]&m[i], carry)
				v[i] = sum | (v[i] &^ m[i])
			}
		}
	}
	zeros := 0
	for i, x := range v {
		if n := len(a) - 64*i; n < 64 {
			x |= ^uint64(0) << uint(n) // ignore bits past the end of a
		}
		zeros += bits.OnesCount64(^x)
	}
	return zeros, peq, v
}

// lcsDP is the textbook O(len(a)·len(b)) dynamic program, kept as the test
// oracle for lcsBits.
func lcsDP(a, b []int32) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for i := range a {
		for j := range b {
			switch {
			case a[i] == b[j]:
				cur[j+1] = prev[j] + 1
			case prev[j+1] >= cur[j]:
				cur[j+1] = prev[j+1]
			default:
				cur[j+1] = cur[j]
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/2)
	}
	return s[:n]
}
