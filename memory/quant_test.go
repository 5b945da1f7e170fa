package memory

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/himes-rl/himes/embedding"
)

func quantizer(t *testing.T, bits, dim int, rotate bool) *Quantizer {
	t.Helper()
	q, err := NewQuantizer(bits, dim, rotate, 7)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// Codes and decoded values worked out by hand from the grid min + step·code.
func TestQuantizeHandComputed(t *testing.T) {
	cases := []struct {
		name      string
		bits      int
		v         []float32
		codes     []byte
		min, step float64
		decoded   []float64
	}{
		// step 2/3; (0.2+1)/step = 1.8 → 2, (0.5+1)/step = 2.25 → 2;
		// codes 0,2,2,3 packed low bits first: 0 | 2<<2 | 2<<4 | 3<<6 = 232
		{"2bit", 2, []float32{-1, 0.2, 0.5, 1}, []byte{232}, -1, 2.0 / 3, []float64{-1, 1.0 / 3, 1.0 / 3, 1}},
		// step 1; codes 0,15,7,8: bytes 0|15<<4 = 240 and 7|8<<4 = 135
		{"4bit", 4, []float32{0, 15, 7.4, 7.6}, []byte{240, 135}, 0, 1, []float64{0, 15, 7, 8}},
		// step 2/255·… : range [−1, 1.55], step 0.01; 0.004 → 100.4 → 100
		{"8bit", 8, []float32{-1, 1.55, 0.004}, []byte{0, 255, 100}, -1, 0.01, []float64{-1, 1.55, 0}},
		// signs ≥ 0 → bits 0,2,4,5,7 of byte 0 (181) and bit 0 of byte 1;
		// s = mean |x| = 10.25/9
		{"1bit", 1, []float32{0.5, -1, 2, -0.5, 0, 3, -2, 1, 0.25}, []byte{181, 1}, -10.25 / 9, 2 * 10.25 / 9,
			[]float64{10.25 / 9, -10.25 / 9, 10.25 / 9, -10.25 / 9, 10.25 / 9, 10.25 / 9, -10.25 / 9, 10.25 / 9, 10.25 / 9}},
		// a constant vector has step 0: every code 0, decoded exactly
		{"constant", 4, []float32{2, 2, 2}, []byte{0, 0}, 2, 0, []float64{2, 2, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := quantizer(t, c.bits, len(c.v), false)
			code, err := q.Encode(c.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(code.Codes) != string(c.codes) {
				t.Fatalf("codes %v, want %v", code.Codes, c.codes)
			}
			if !near(float64(code.Min), c.min, 1e-6) || !near(float64(code.Step), c.step, 1e-6) {
				t.Fatalf("min %v step %v, want %v %v", code.Min, code.Step, c.min, c.step)
			}
			got := q.Decode(code)
			norm := 0.0
			for i, want := range c.decoded {
				if !near(float64(got[i]), want, 1e-5) {
					t.Fatalf("decoded %v, want %v", got, c.decoded)
				}
				norm += want * want
			}
			if !near(float64(code.Norm), math.Sqrt(norm), 1e-5) {
				t.Fatalf("norm %v, want %v", code.Norm, math.Sqrt(norm))
			}
			if q.CodeBytes() != len(c.codes) || q.BytesPerVector() != len(c.codes)+12 {
				t.Fatalf("code bytes %d / %d, want %d", q.CodeBytes(), q.BytesPerVector(), len(c.codes))
			}
		})
	}
}

func randVec(rng *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

func dot64(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func TestRotationIsOrthogonalAndSeeded(t *testing.T) {
	const dim = 16
	q := quantizer(t, 8, dim, true)
	// RᵀR = I
	for i := range dim {
		for j := range dim {
			s := 0.0
			for k := range dim {
				s += q.rot[k*dim+i] * q.rot[k*dim+j]
			}
			want := 0.0
			if i == j {
				want = 1
			}
			if !near(s, want, 1e-12) {
				t.Fatalf("(RᵀR)[%d][%d] = %v", i, j, s)
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		u, v := randVec(rng, dim), randVec(rng, dim)
		u64, v64 := q.rotate(u), q.rotate(v)
		plainU, plainV := quantizer(t, 8, dim, false).rotate(u), quantizer(t, 8, dim, false).rotate(v)
		if !near(dot64(u64, v64), dot64(plainU, plainV), 1e-9) || !near(dot64(u64, u64), dot64(plainU, plainU), 1e-9) {
			t.Fatalf("rotation changed a dot product or norm: %v vs %v", dot64(u64, v64), dot64(plainU, plainV))
		}
	}
	again := quantizer(t, 4, dim, true)
	other, _ := NewQuantizer(8, dim, true, 8)
	same, differ := true, false
	for i := range q.rot {
		same = same && q.rot[i] == again.rot[i]
		differ = differ || q.rot[i] != other.rot[i]
	}
	if !same || !differ {
		t.Fatalf("rotation must be a function of the seed: same seed equal %v, other seed differs %v", same, differ)
	}
}

// With a rotation the grid lives in the rotated space; decoding rotates
// back, so the error per rotated coordinate (at most step/2) bounds the
// error of the decoded vector: |x − x̂| ≤ √dim·step/2.
func TestRotatedDecodeErrorBound(t *testing.T) {
	const dim = 32
	rng := rand.New(rand.NewPCG(5, 6))
	for _, bits := range []int{8, 4, 2} {
		q := quantizer(t, bits, dim, true)
		for range 10 {
			v := randVec(rng, dim)
			c, err := q.Encode(v)
			if err != nil {
				t.Fatal(err)
			}
			d := q.Decode(c)
			e := 0.0
			for i := range v {
				e += (float64(v[i]) - float64(d[i])) * (float64(v[i]) - float64(d[i]))
			}
			if bound := math.Sqrt(dim) * float64(c.Step) / 2; math.Sqrt(e) > bound+1e-5 {
				t.Fatalf("%d bits: error %v above bound %v", bits, math.Sqrt(e), bound)
			}
		}
	}
}

// Scoring from codes (lookup tables, rotated query) must equal the cosine
// of the query with the decoded vector.
func TestQuantQueryCosineMatchesDecoded(t *testing.T) {
	const dim = 37 // not a multiple of 8: the last byte is partly used
	rng := rand.New(rand.NewPCG(9, 10))
	vecs := make([][]float32, 50)
	for i := range vecs {
		vecs[i] = randVec(rng, dim)
	}
	vecs = append(vecs, make([]float32, dim)) // zero vector: cosine 0
	for _, bits := range QuantBits {
		for _, rot := range []bool{false, true} {
			q := quantizer(t, bits, dim, rot)
			s, err := NewQuantSet(q, vecs)
			if err != nil {
				t.Fatal(err)
			}
			qv := randVec(rng, dim)
			p, err := s.Prepare(qv)
			if err != nil {
				t.Fatal(err)
			}
			for i := range vecs {
				want := embedding.Cosine(qv, q.Decode(s.Code(i)))
				if got := p.Cosine(i); !near(got, want, 1e-5) {
					t.Fatalf("%s vector %d: cosine %v, decoded gives %v", q.Name(), i, got, want)
				}
			}
		}
	}
}

func TestQuantizerRejectsBadInput(t *testing.T) {
	if _, err := NewQuantizer(3, 4, false, 1); err == nil {
		t.Fatal("3 bits accepted")
	}
	if _, err := NewQuantizer(8, 0, false, 1); err == nil {
		t.Fatal("dimension 0 accepted")
	}
	q := quantizer(t, 4, 4, false)
	if _, err := q.Encode([]float32{1, 2, 3}); err == nil {
		t.Fatal("wrong dimension encoded")
	}
	s, _ := NewQuantSet(q, [][]float32{{1, 2, 3, 4}})
	if _, err := s.Prepare([]float32{1}); err == nil {
		t.Fatal("wrong query dimension accepted")
	}
}
