package retrieval

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// binWriter writes little-endian values to w and keeps the first error, so
// a sequence of writes is checked once. Both index formats are written with
// it: index.bin straight (SaveIndex), the on-disk index through diskWriter,
// which frames and hashes its sections.
type binWriter struct {
	w   io.Writer
	err error
	buf [8]byte
}

func (w *binWriter) bytes(b []byte) {
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
}

func (w *binWriter) str(s string) {
	if w.err == nil {
		_, w.err = io.WriteString(w.w, s)
	}
}

func (w *binWriter) u32(v uint32) {
	binary.LittleEndian.PutUint32(w.buf[:4], v)
	w.bytes(w.buf[:4])
}

func (w *binWriter) u64(v uint64) {
	binary.LittleEndian.PutUint64(w.buf[:8], v)
	w.bytes(w.buf[:8])
}

// u32s, u64s and f64s write arrays through a 4 KiB buffer.
func (w *binWriter) u32s(vs []uint32) {
	var b [4096]byte
	for len(vs) > 0 && w.err == nil {
		n := min(len(vs), len(b)/4)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], vs[i])
		}
		w.bytes(b[:4*n])
		vs = vs[n:]
	}
}

func (w *binWriter) u64s(vs []uint64) {
	var b [4096]byte
	for len(vs) > 0 && w.err == nil {
		n := min(len(vs), len(b)/8)
		for i := range n {
			binary.LittleEndian.PutUint64(b[8*i:], vs[i])
		}
		w.bytes(b[:8*n])
		vs = vs[n:]
	}
}

func (w *binWriter) f64s(vs []float64) {
	var b [4096]byte
	for len(vs) > 0 && w.err == nil {
		n := min(len(vs), len(b)/8)
		for i := range n {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(vs[i]))
		}
		w.bytes(b[:8*n])
		vs = vs[n:]
	}
}

// strings writes a count, then each string as its length and bytes.
func (w *binWriter) strings(ss []string) {
	w.u32(uint32(len(ss)))
	for _, s := range ss {
		w.u32(uint32(len(s)))
		w.str(s)
	}
}

type binReader struct {
	b   []byte
	err error
}

func (r *binReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("truncated: want %d bytes, %d left", n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}
func (r *binReader) u32() uint32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}
func (r *binReader) u64() uint64 {
	b := r.take(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}
func (r *binReader) u32s(n int) []uint32 {
	b := r.take(4 * n)
	if b == nil {
		return nil
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}
func (r *binReader) strings() []string {
	n := int(r.u32())
	if r.err == nil && n > len(r.b)/4 {
		r.err = fmt.Errorf("string count %d exceeds remaining %d bytes", n, len(r.b))
	}
	if r.err != nil {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = string(r.take(int(r.u32())))
	}
	return out
}
