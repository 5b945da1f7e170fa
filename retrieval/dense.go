package retrieval

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/himes-rl/himes/embedding"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// DenseIndex is exact inner-product search over L2-normalized float32
// vectors (so scores are cosines), one row per document in document order.
type DenseIndex struct {
	dim  int
	rows int
	data []float32 // rows × dim, row-major
	name string    // the embedder that produced the vectors
}

// NewDenseIndex copies normalized vectors into one matrix.
func NewDenseIndex(vecs [][]float32, embedder string) (*DenseIndex, error) {
	if len(vecs) == 0 {
		return nil, fmt.Errorf("dense index: no vectors")
	}
	dim := len(vecs[0])
	d := &DenseIndex{dim: dim, rows: len(vecs), data: make([]float32, 0, dim*len(vecs)), name: embedder}
	for i, v := range vecs {
		if len(v) != dim {
			return nil, fmt.Errorf("dense index: vector %d has dimension %d, want %d", i, len(v), dim)
		}
		d.data = append(d.data, embedding.Normalize(v)...)
	}
	return d, nil
}

// EmbedDocs embeds texts in batches and builds a dense index.
func EmbedDocs(ctx context.Context, e embedding.Embedder, texts []string, batch int) (*DenseIndex, error) {
	return embedDocs(ctx, e, texts, batch, nil)
}

// embedDocs is EmbedDocs telling progress (when set; else a log line every
// 5 s) the texts embedded so far.
func embedDocs(ctx context.Context, e embedding.Embedder, texts []string, batch int, progress func(done, total int)) (*DenseIndex, error) {
	vecs := make([][]float32, 0, len(texts))
	last := time.Now()
	for start := 0; start < len(texts); start += batch {
		vs, err := embedding.EmbedAs(ctx, e, embedding.RolePassage, texts[start:min(start+batch, len(texts))])
		if err != nil {
			return nil, fmt.Errorf("embed documents %d..: %w", start, err)
		}
		vecs = append(vecs, vs...)
		switch {
		case progress != nil:
			progress(len(vecs), len(texts))
		case time.Since(last) > 5*time.Second:
			// a remote embedder may take minutes on a large KB (once: it caches)
			slog.Info("embedding knowledge base", "embedder", e.Name(), "done", len(vecs), "total", len(texts))
			last = time.Now()
		}
	}
	return NewDenseIndex(vecs, e.Name())
}

// Dim is the vector dimension.
func (d *DenseIndex) Dim() int { return d.dim }

// Vector returns document i's (normalized) vector; callers must not modify it.
func (d *DenseIndex) Vector(i int) []float32 { return d.data[i*d.dim : (i+1)*d.dim] }

// Scores returns the cosine of q with every document: one float32
// matrix–vector product (BLAS sgemv).
func (d *DenseIndex) Scores(q []float32) ([]float32, error) {
	if len(q) != d.dim {
		return nil, fmt.Errorf("dense search: query dimension %d, index (%s) has %d", len(q), d.name, d.dim)
	}
	q = embedding.Normalize(q)
	y := make([]float32, d.rows)
	blas32.Gemv(blas.NoTrans, 1,
		blas32.General{Rows: d.rows, Cols: d.dim, Stride: d.dim, Data: d.data},
		blas32.Vector{N: d.dim, Inc: 1, Data: q}, 0,
		blas32.Vector{N: d.rows, Inc: 1, Data: y})
	return y, nil
}

// Search returns the k documents with the highest cosine, ties by higher
// document number first (the BM25 index's convention).
func (d *DenseIndex) Search(q []float32, k int) ([]Hit, error) {
	y, err := d.Scores(q)
	if err != nil {
		return nil, err
	}
	return bestOf(y, k), nil
}

// bestOf is the top k of the scores y by document number.
func bestOf(y []float32, k int) []Hit {
	if k <= 0 {
		return nil
	}
	var top topK
	top.reset(scoreDocDesc, k, make([]Hit, 0, k))
	for i, s := range y {
		if hit := (Hit{Doc: i, Score: float64(s)}); top.accepts(hit) {
			top.push(hit)
		}
	}
	out, _ := top.sorted()
	return out
}

// RRF fuses rankings by reciprocal rank fusion: score(d) = Σ_lists 1/(k + rank),
// ranks from 1; the result is sorted best first (ties by document desc).
func RRF(k float64, lists ...[]Hit) []Hit {
	acc := map[int]float64{}
	for _, l := range lists {
		for r, h := range l {
			acc[h.Doc] += 1 / (k + float64(r+1))
		}
	}
	out := make([]Hit, 0, len(acc))
	for d, s := range acc {
		out = append(out, Hit{Doc: d, Score: s})
	}
	slices.SortFunc(out, scoreDocDesc.compare)
	return out
}
