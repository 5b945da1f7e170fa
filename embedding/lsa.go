package embedding

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/gob"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/internal/words"
)

// LSAFormat tags persisted LSA models.
const LSAFormat = "himes-lsa-v1"

// LSAFile is the LSA model's file name inside an index directory.
const LSAFile = "lsa.gob"

// LSA is latent semantic analysis: texts are TF-IDF vectors
// (sublinear tf, smoothed idf, function words dropped, L2-normalized)
// projected on the top right singular vectors of the knowledge base's
// TF-IDF matrix, then L2-normalized. Words that co-occur across the corpus
// share dimensions, so "university" and "degree" are close where hashing
// only matches identical words. It is fitted in Go (a randomized truncated
// SVD), deterministic for a corpus and settings, and needs no service.
type LSA struct {
	meta  LSAMeta
	terms map[string]int
	idf   []float64
	proj  []float32 // term t, dimension d at t*dim+d
	name  string
}

// LSAMeta records what a model was fitted on, to refuse a stale one.
type LSAMeta struct {
	Format        string
	KBFingerprint string
	ChunkWords    int
	ChunkStride   int
	Dim           int
	MinDF         int
	Docs          int
}

// LSAConfig are the fitting settings (retrieval.lsa_dim, lsa_min_df).
type LSAConfig struct {
	Dim   int
	MinDF int
}

func lsaTokens(text string, stop map[string]bool) []string {
	var out []string
	analysis.ForEachPlainToken(text, func(tok []byte) {
		if len(tok) > 1 && !stop[string(tok)] {
			out = append(out, string(tok))
		}
	})
	return out
}

// FitLSA fits an LSA model on docs (the knowledge base's chunk texts).
func FitLSA(ctx context.Context, docs []string, cfg LSAConfig, meta LSAMeta) (*LSA, error) {
	if cfg.Dim < 1 || cfg.MinDF < 1 {
		return nil, fmt.Errorf("lsa: dimension and min_df must be ≥ 1, got %d and %d", cfg.Dim, cfg.MinDF)
	}
	stop := words.FunctionWords()
	toks := make([][]string, len(docs))
	df := map[string]int{}
	for i, d := range docs {
		toks[i] = lsaTokens(d, stop)
		seen := map[string]bool{}
		for _, t := range toks[i] {
			if !seen[t] {
				seen[t] = true
				df[t]++
			}
		}
	}
	var vocab []string
	for t, n := range df {
		if n >= cfg.MinDF {
			vocab = append(vocab, t)
		}
	}
	slices.Sort(vocab)
	if len(vocab) < 2 {
		return nil, fmt.Errorf("lsa: %d terms occur in ≥ %d documents: too few to fit", len(vocab), cfg.MinDF)
	}
	e := &LSA{terms: make(map[string]int, len(vocab)), idf: make([]float64, len(vocab))}
	n := float64(len(docs))
	for i, t := range vocab {
		e.terms[t] = i
		e.idf[i] = math.Log((1+n)/(1+float64(df[t]))) + 1
	}
	// the TF-IDF matrix, sparse by rows
	rows := make([]sparseVec, len(docs))
	for i, ts := range toks {
		rows[i] = e.tfidf(ts)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k := min(cfg.Dim, len(vocab)-1, len(docs)-1)
	if k < 1 {
		return nil, fmt.Errorf("lsa: %d documents: too few to fit", len(docs))
	}
	v, err := randomizedRightSVD(ctx, rows, len(vocab), k)
	if err != nil {
		return nil, err
	}
	e.proj = v
	meta.Format, meta.Dim, meta.MinDF, meta.Docs = LSAFormat, k, cfg.MinDF, len(docs)
	e.meta = meta
	e.setName()
	return e, nil
}

type sparseVec struct {
	idx []int
	val []float64
}

// tfidf is the L2-normalized sublinear TF-IDF vector of tokens over the vocabulary.
func (e *LSA) tfidf(toks []string) sparseVec {
	tf := map[int]int{}
	for _, t := range toks {
		if i, ok := e.terms[t]; ok {
			tf[i]++
		}
	}
	var v sparseVec
	for i := range tf {
		v.idx = append(v.idx, i)
	}
	slices.Sort(v.idx)
	norm := 0.0
	for _, i := range v.idx {
		w := (1 + math.Log(float64(tf[i]))) * e.idf[i]
		v.val = append(v.val, w)
		norm += w * w
	}
	if norm > 0 {
		norm = math.Sqrt(norm)
		for j := range v.val {
			v.val[j] /= norm
		}
	}
	return v
}

// randomizedRightSVD returns the top k right singular vectors of the sparse
// matrix rows (n × cols) as a cols × k row-major slice, by the randomized
// range finder of Halko, Martinsson and Tropp (oversampling 10, two power
// iterations) and the eigendecomposition of the small B·Bᵀ. The random
// matrix is seeded, so the fit is deterministic.
func randomizedRightSVD(ctx context.Context, rows []sparseVec, cols, k int) ([]float32, error) {
	l := min(k+10, cols, len(rows))
	rng := rand.New(rand.NewPCG(1, 2))
	omega := mat.NewDense(cols, l, nil)
	for i := range cols {
		for j := range l {
			omega.Set(i, j, rng.NormFloat64())
		}
	}
	n := len(rows)
	// A·X for X cols × l
	mulA := func(x *mat.Dense) *mat.Dense {
		y := mat.NewDense(n, l, nil)
		for r, row := range rows {
			out := y.RawRowView(r)
			for j, c := range row.idx {
				w := row.val[j]
				xr := x.RawRowView(c)
				for q := range out {
					out[q] += w * xr[q]
				}
			}
		}
		return y
	}
	// Aᵀ·Y for Y n × l
	mulAT := func(y *mat.Dense) *mat.Dense {
		x := mat.NewDense(cols, l, nil)
		for r, row := range rows {
			yr := y.RawRowView(r)
			for j, c := range row.idx {
				w := row.val[j]
				out := x.RawRowView(c)
				for q := range out {
					out[q] += w * yr[q]
				}
			}
		}
		return x
	}
	// orth orthonormalizes the columns (thin QR's Q) by modified
	// Gram–Schmidt, twice for stability; a full QR's Q would be rows × rows.
	orth := func(m *mat.Dense) *mat.Dense {
		r, c := m.Dims()
		colv := make([][]float64, c)
		for j := range c {
			colv[j] = mat.Col(nil, j, m)
		}
		for range 2 {
			for j := range c {
				for i := range j {
					dot := 0.0
					for t, x := range colv[j] {
						dot += x * colv[i][t]
					}
					for t := range colv[j] {
						colv[j][t] -= dot * colv[i][t]
					}
				}
				norm := 0.0
				for _, x := range colv[j] {
					norm += x * x
				}
				if norm = math.Sqrt(norm); norm > 1e-12 {
					for t := range colv[j] {
						colv[j][t] /= norm
					}
				} else {
					clear(colv[j]) // rank-deficient: a zero column adds nothing
				}
			}
		}
		out := mat.NewDense(r, c, nil)
		for j := range c {
			out.SetCol(j, colv[j])
		}
		return out
	}
	q := orth(mulA(omega))
	for range 2 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		q = orth(mulA(orth(mulAT(q))))
	}
	bt := mulAT(q) // Bᵀ = Aᵀ·Q, cols × l
	var bbt mat.SymDense
	bbt.SymOuterK(1, bt.T())
	var eig mat.EigenSym
	if !eig.Factorize(&bbt, true) {
		return nil, fmt.Errorf("lsa: eigendecomposition failed")
	}
	vals := eig.Values(nil) // ascending
	var vecs mat.Dense
	eig.VectorsTo(&vecs)
	out := make([]float32, cols*k)
	for d := range k {
		col := l - 1 - d // the d-th largest
		sigma := math.Sqrt(max(vals[col], 0))
		if sigma == 0 {
			continue
		}
		// v_d = Bᵀ u_d / σ_d
		u := mat.Col(nil, col, &vecs)
		for c := range cols {
			s := 0.0
			row := bt.RawRowView(c)
			for j, x := range row {
				s += x * u[j]
			}
			out[c*k+d] = float32(s / sigma)
		}
	}
	// a singular vector's sign is arbitrary: fix it (largest |entry| > 0) so
	// the model is reproducible across platforms' eigensolvers
	for d := range k {
		best, sign := 0.0, float32(1)
		for c := range cols {
			if a := math.Abs(float64(out[c*k+d])); a > best {
				best, sign = a, 1
				if out[c*k+d] < 0 {
					sign = -1
				}
			}
		}
		for c := range cols {
			out[c*k+d] *= sign
		}
	}
	return out, nil
}

func (e *LSA) setName() {
	h := sha256.New()
	var b [8]byte
	for _, t := range e.sortedTerms() {
		h.Write([]byte(t))
		h.Write([]byte{0})
	}
	for _, x := range e.idf {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(x))
		h.Write(b[:])
	}
	for _, x := range e.proj {
		binary.LittleEndian.PutUint32(b[:4], math.Float32bits(x))
		h.Write(b[:4])
	}
	e.name = fmt.Sprintf("lsa-tfidf-v1/%d/%s", e.meta.Dim, hex.EncodeToString(h.Sum(nil))[:12])
}

func (e *LSA) sortedTerms() []string {
	out := make([]string, len(e.terms))
	for t, i := range e.terms {
		out[i] = t
	}
	return out
}

// Dim implements Embedder.
func (e *LSA) Dim() int { return e.meta.Dim }

// Name implements Embedder: the fingerprint of the fitted model, so memories
// embedded with another fit are refused.
func (e *LSA) Name() string { return e.name }

// Meta returns what the model was fitted on.
func (e *LSA) Meta() LSAMeta { return e.meta }

// Embed implements Embedder. A text without any known term is the zero
// vector (cosine 0 with everything).
func (e *LSA) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	stop := words.FunctionWords()
	k := e.meta.Dim
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		v := e.tfidf(lsaTokens(t, stop))
		acc := make([]float64, k)
		for j, c := range v.idx {
			w := v.val[j]
			row := e.proj[c*k : (c+1)*k]
			for d, x := range row {
				acc[d] += w * float64(x)
			}
		}
		norm := 0.0
		for _, x := range acc {
			norm += x * x
		}
		vec := make([]float32, k)
		if norm > 0 {
			norm = math.Sqrt(norm)
			for d, x := range acc {
				vec[d] = float32(x / norm)
			}
		}
		out[i] = vec
	}
	return out, nil
}

type lsaFile struct {
	Meta  LSAMeta
	Terms []string
	IDF   []float64
	Proj  []float32
	Name  string
}

// SaveLSA writes the model into dir (atomically and durably).
func SaveLSA(ctx context.Context, dir string, e *LSA) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("save lsa: %w", err)
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(lsaFile{Meta: e.meta, Terms: e.sortedTerms(), IDF: e.idf, Proj: e.proj, Name: e.name}); err != nil {
		return fmt.Errorf("save lsa: %w", err)
	}
	return atomicfile.WriteFile(filepath.Join(dir, LSAFile), buf.Bytes(), 0o644)
}

// LoadLSA reads the model of an index directory and checks it was fitted on
// what want describes (knowledge base, chunking, dimension, min_df); a
// model fitted on anything else is stale and refused.
func LoadLSA(ctx context.Context, dir string, want LSAMeta, cfg LSAConfig) (*LSA, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("load lsa: %w", err)
	}
	path := filepath.Join(dir, LSAFile)
	raw, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("%s: no LSA model in the index: rebuild it with `himes index build` (retrieval.embedder or retrieval.memory.embedder lsa)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("load lsa: %w", err)
	}
	var f lsaFile
	if err := gob.NewDecoder(bytes.NewReader(raw)).Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m := f.Meta
	switch {
	case m.Format != LSAFormat:
		return nil, fmt.Errorf("%s: format %q, want %q: rebuild with `himes index build`", path, m.Format, LSAFormat)
	case m.KBFingerprint != want.KBFingerprint:
		return nil, fmt.Errorf("%s: stale: fitted on a knowledge base with SHA-256 %.12s…, this one has %.12s…: rebuild with `himes index build`", path, m.KBFingerprint, want.KBFingerprint)
	case m.ChunkWords != want.ChunkWords || m.ChunkStride != want.ChunkStride:
		return nil, fmt.Errorf("%s: stale: fitted with chunk_words=%d chunk_stride=%d, config says %d/%d", path, m.ChunkWords, m.ChunkStride, want.ChunkWords, want.ChunkStride)
	case m.MinDF != cfg.MinDF || (m.Dim != cfg.Dim && m.Dim != min(cfg.Dim, m.Docs-1)):
		return nil, fmt.Errorf("%s: stale: fitted with lsa_dim=%d lsa_min_df=%d, config says %d/%d", path, m.Dim, m.MinDF, cfg.Dim, cfg.MinDF)
	case len(f.IDF) != len(f.Terms) || len(f.Proj) != len(f.Terms)*m.Dim:
		return nil, fmt.Errorf("%s: corrupt: %d terms, %d idf values, %d projection values for dimension %d", path, len(f.Terms), len(f.IDF), len(f.Proj), m.Dim)
	}
	e := &LSA{meta: m, terms: make(map[string]int, len(f.Terms)), idf: f.IDF, proj: f.Proj}
	for i, t := range f.Terms {
		if i%(1<<16) == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("load lsa %s: %w", path, err)
			}
		}
		e.terms[t] = i
	}
	e.setName()
	if e.name != f.Name {
		return nil, fmt.Errorf("%s: corrupt: content fingerprint %s, recorded %s", path, e.name, f.Name)
	}
	return e, nil
}
