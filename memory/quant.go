package memory

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
)

// Quantizer is scalar quantization of embeddings to Bits bits per
// coordinate, optionally after a seeded random orthogonal rotation (the idea
// behind TurboQuant: a rotation spreads a vector's energy evenly over the
// coordinates, so one uniform grid per vector fits every coordinate).
//
// At 2, 4 and 8 bits a vector x (rotated when Rotate) is coded on the
// uniform grid from min(x) to max(x) with 2^Bits levels: code_i =
// round((x_i − min)/step), step = (max − min)/(2^Bits − 1), decoded as
// min + step·code_i. At 1 bit the grid is the sign: code_i = [x_i ≥ 0],
// decoded as ±s with s = mean |x_i| (the least-squares scale for signs),
// i.e. min = −s and step = 2s in the same affine form. Codes are packed
// little-end first within bytes (coordinate i at bit (i·Bits) mod 8 of byte
// i·Bits/8).
type Quantizer struct {
	Bits   int
	Rotate bool
	dim    int
	rot    []float64 // dim×dim row-major orthogonal matrix; nil when !Rotate
}

// QuantBits are the bit widths a Quantizer supports.
var QuantBits = []int{8, 4, 2, 1}

// NewQuantizer returns a quantizer for dim-dimensional vectors. With rotate
// the rotation is the Q factor of the QR decomposition of a dim×dim matrix
// of standard normal draws from seed, its columns' signs fixed so that R has
// a positive diagonal (which makes Q uniformly distributed).
func NewQuantizer(bits, dim int, rotate bool, seed uint64) (*Quantizer, error) {
	switch bits {
	case 1, 2, 4, 8:
	default:
		return nil, fmt.Errorf("quantizer: %d bits: want 1, 2, 4 or 8", bits)
	}
	if dim < 1 {
		return nil, fmt.Errorf("quantizer: dimension %d", dim)
	}
	q := &Quantizer{Bits: bits, Rotate: rotate, dim: dim}
	if rotate {
		q.rot = randomRotation(dim, seed)
	}
	return q, nil
}

func randomRotation(dim int, seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	g := mat.NewDense(dim, dim, nil)
	for i := range dim {
		for j := range dim {
			g.Set(i, j, rng.NormFloat64())
		}
	}
	var qr mat.QR
	qr.Factorize(g)
	var qm, rm mat.Dense
	qr.QTo(&qm)
	qr.RTo(&rm)
	out := make([]float64, dim*dim)
	for j := range dim {
		s := 1.0
		if rm.At(j, j) < 0 {
			s = -1
		}
		for i := range dim {
			out[i*dim+j] = s * qm.At(i, j)
		}
	}
	return out
}

// Dim is the dimension the quantizer codes.
func (q *Quantizer) Dim() int { return q.dim }

// Name is e.g. "q4" or "q4+rot".
func (q *Quantizer) Name() string {
	if q.Rotate {
		return fmt.Sprintf("q%d+rot", q.Bits)
	}
	return fmt.Sprintf("q%d", q.Bits)
}

// CodeBytes is the packed size of one vector's codes.
func (q *Quantizer) CodeBytes() int { return (q.dim*q.Bits + 7) / 8 }

// BytesPerVector is what one stored vector takes: its codes plus three
// float32 (min, step and the decoded vector's norm, kept for cosines).
func (q *Quantizer) BytesPerVector() int { return q.CodeBytes() + 12 }

// QCode is one quantized vector: x_i ≈ Min + Step·code_i in the rotated
// space, and Norm = |decoded vector|.
type QCode struct {
	Codes           []byte
	Min, Step, Norm float32
}

// rotate returns R·v (v itself, converted, without a rotation).
func (q *Quantizer) rotate(v []float32) []float64 {
	out := make([]float64, q.dim)
	if q.rot == nil {
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	for i := range q.dim {
		row := q.rot[i*q.dim : (i+1)*q.dim]
		s := 0.0
		for j, x := range v {
			s += row[j] * float64(x)
		}
		out[i] = s
	}
	return out
}

// Encode quantizes v.
func (q *Quantizer) Encode(v []float32) (QCode, error) {
	if len(v) != q.dim {
		return QCode{}, fmt.Errorf("quantize: vector of dimension %d, quantizer has %d", len(v), q.dim)
	}
	x := q.rotate(v)
	c := QCode{Codes: make([]byte, q.CodeBytes())}
	var lo, step float64
	if q.Bits == 1 {
		s := 0.0
		for _, xi := range x {
			s += math.Abs(xi)
		}
		s /= float64(len(x))
		lo, step = -s, 2*s
		for i, xi := range x {
			if xi >= 0 {
				c.Codes[i/8] |= 1 << (i % 8)
			}
		}
	} else {
		lo = x[0]
		hi := x[0]
		for _, xi := range x {
			lo, hi = min(lo, xi), max(hi, xi)
		}
		levels := float64(int(1)<<q.Bits - 1)
		step = (hi - lo) / levels
		for i, xi := range x {
			code := 0.0
			if step > 0 {
				code = min(max(math.Round((xi-lo)/step), 0), levels)
			}
			bit := i * q.Bits
			c.Codes[bit/8] |= byte(code) << (bit % 8)
		}
	}
	c.Min, c.Step = float32(lo), float32(step)
	n := 0.0
	for i := range q.dim {
		d := float64(c.Min) + float64(c.Step)*float64(q.code(c.Codes, i))
		n += d * d
	}
	c.Norm = float32(math.Sqrt(n))
	return c, nil
}

// code is coordinate i's code in packed codes.
func (q *Quantizer) code(codes []byte, i int) byte {
	bit := i * q.Bits
	return codes[bit/8] >> (bit % 8) & byte(int(1)<<q.Bits-1)
}

// Decode returns the vector c codes, rotated back into the original space
// (Rᵀ·x̂), so that it compares with unquantized queries and chunks.
func (q *Quantizer) Decode(c QCode) []float32 {
	x := make([]float64, q.dim)
	for i := range x {
		x[i] = float64(c.Min) + float64(c.Step)*float64(q.code(c.Codes, i))
	}
	out := make([]float32, q.dim)
	if q.rot == nil {
		for i, xi := range x {
			out[i] = float32(xi)
		}
		return out
	}
	for j := range q.dim {
		s := 0.0
		for i := range q.dim {
			s += q.rot[i*q.dim+j] * x[i]
		}
		out[j] = float32(s)
	}
	return out
}

// QuantSet is quantized vectors stored contiguously, scored against a query
// without decoding them (see Prepare).
type QuantSet struct {
	q                *Quantizer
	codes            []byte // Len()·CodeBytes()
	mins, steps, nrm []float32
}

// NewQuantSet quantizes vecs.
func NewQuantSet(q *Quantizer, vecs [][]float32) (*QuantSet, error) {
	s := &QuantSet{q: q, codes: make([]byte, 0, len(vecs)*q.CodeBytes()),
		mins: make([]float32, len(vecs)), steps: make([]float32, len(vecs)), nrm: make([]float32, len(vecs))}
	for i, v := range vecs {
		c, err := q.Encode(v)
		if err != nil {
			return nil, fmt.Errorf("vector %d: %w", i, err)
		}
		s.codes = append(s.codes, c.Codes...)
		s.mins[i], s.steps[i], s.nrm[i] = c.Min, c.Step, c.Norm
	}
	return s, nil
}

// Len is the number of vectors.
func (s *QuantSet) Len() int { return len(s.mins) }

// Code returns vector i's code.
func (s *QuantSet) Code(i int) QCode {
	n := s.q.CodeBytes()
	return QCode{Codes: s.codes[i*n : (i+1)*n], Min: s.mins[i], Step: s.steps[i], Norm: s.nrm[i]}
}

// QuantQuery is a query prepared for scoring against a QuantSet: rotated,
// and below 8 bits a lookup table per code byte (the query's partial dot
// product with every value the byte can hold), so scoring a vector is one
// table lookup per byte.
type QuantQuery struct {
	s    *QuantSet
	x    []float32 // rotated query (8 bits)
	lut  []float32 // CodeBytes()·256 (below 8 bits)
	sum  float64   // Σ x_i
	norm float64   // |query|
}

// Prepare readies qv for Cosine.
func (s *QuantSet) Prepare(qv []float32) (*QuantQuery, error) {
	q := s.q
	if len(qv) != q.dim {
		return nil, fmt.Errorf("quantized scoring: query of dimension %d, vectors have %d", len(qv), q.dim)
	}
	x := q.rotate(qv)
	p := &QuantQuery{s: s}
	nn := 0.0
	for _, v := range qv {
		nn += float64(v) * float64(v)
	}
	p.norm = math.Sqrt(nn)
	for _, xi := range x {
		p.sum += xi
	}
	if q.Bits == 8 {
		p.x = make([]float32, q.dim)
		for i, xi := range x {
			p.x[i] = float32(xi)
		}
		return p, nil
	}
	per := 8 / q.Bits
	mask := int(1)<<q.Bits - 1
	p.lut = make([]float32, q.CodeBytes()*256)
	for j := range q.CodeBytes() {
		t := p.lut[j*256 : (j+1)*256]
		for b := range 256 {
			sum := 0.0
			for k := range per {
				i := j*per + k
				if i >= q.dim {
					break
				}
				sum += x[i] * float64(b>>(k*q.Bits)&mask)
			}
			t[b] = float32(sum)
		}
	}
	return p, nil
}

// Cosine is the cosine of the query with decoded vector i (0 when either
// is zero).
func (p *QuantQuery) Cosine(i int) float64 {
	s := p.s
	n := s.q.CodeBytes()
	codes := s.codes[i*n : (i+1)*n]
	// four accumulators: the sums do not wait on each other
	var d0, d1, d2, d3 float32
	j := 0
	if p.x != nil {
		x := p.x[:len(codes)]
		for ; j+4 <= len(codes); j += 4 {
			d0 += x[j] * float32(codes[j])
			d1 += x[j+1] * float32(codes[j+1])
			d2 += x[j+2] * float32(codes[j+2])
			d3 += x[j+3] * float32(codes[j+3])
		}
		for ; j < len(codes); j++ {
			d0 += x[j] * float32(codes[j])
		}
	} else {
		lut := p.lut[:len(codes)*256]
		for ; j+4 <= len(codes); j += 4 {
			d0 += lut[j*256+int(codes[j])]
			d1 += lut[(j+1)*256+int(codes[j+1])]
			d2 += lut[(j+2)*256+int(codes[j+2])]
			d3 += lut[(j+3)*256+int(codes[j+3])]
		}
		for ; j < len(codes); j++ {
			d0 += lut[j*256+int(codes[j])]
		}
	}
	dot := (d0 + d1) + (d2 + d3)
	full := float64(s.mins[i])*p.sum + float64(s.steps[i])*float64(dot)
	if p.norm == 0 || s.nrm[i] == 0 {
		return 0
	}
	return full / (p.norm * float64(s.nrm[i]))
}
