// Package embedding maps texts to vectors, for dense retrieval and for
// long-term memory, which compare a query, chunks and memories in one
// space: the hashing embedder (the embedded default, lexical), LSA fitted
// on the knowledge base (semantic, no service) and Ollama's /api/embed.
// Every embedder names its space; vectors of two names are never compared.
package embedding

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/internal/ollama"

	"github.com/ollama/ollama/api"
)

// Embedder maps texts to vectors. Implementations are safe for concurrent use.
// The vectors returned may be shared with other calls (an embedder may keep
// them): callers must not modify them.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Dim is the vector size (0 while unknown, e.g. before the first call to a
	// remote model).
	Dim() int
	// Name identifies the embedding space; vectors with different names are
	// never compared (persisted memories record it).
	Name() string
}

// Hash is the embedded default: signed feature hashing of word
// unigrams and bigrams (the plain analyzer's tokens), L2-normalized. It needs
// no model, is deterministic across runs and platforms, and puts texts that
// share words and word pairs close together — a lexical, not a semantic,
// similarity, which is what the quickstart needs and all it claims.
type Hash struct{ dim int }

// NewHash returns a hashing embedder of the given dimension.
func NewHash(dim int) (*Hash, error) {
	if dim < 2 {
		return nil, fmt.Errorf("hash embedder: dimension must be ≥ 2, got %d", dim)
	}
	return &Hash{dim: dim}, nil
}

// Dim implements Embedder.
func (h *Hash) Dim() int { return h.dim }

// Name implements Embedder.
func (h *Hash) Name() string { return fmt.Sprintf("hash-uni-bi-fnv1a-v1/%d", h.dim) }

// Embed implements Embedder.
func (h *Hash) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		out[i] = h.embed(t)
	}
	return out, nil
}

func (h *Hash) embed(text string) []float32 {
	v := make([]float64, h.dim)
	add := func(x uint64) {
		// low bits pick the coordinate, the top bit the sign: independent
		// enough for hashing-trick purposes.
		s := 1.0
		if x>>63 == 1 {
			s = -1
		}
		v[x%uint64(h.dim)] += s
	}
	var prev []byte
	analysis.ForEachPlainToken(text, func(tok []byte) {
		add(fnv1a(fnv1a(fnvOffset, "u\x00"), string(tok)))
		if prev != nil {
			add(fnv1a(fnv1a(fnv1a(fnv1a(fnvOffset, "b\x00"), string(prev)), "\x00"), string(tok)))
		}
		prev = append(prev[:0], tok...)
	})
	return normalize64(v)
}

// FNV-1a (64-bit), inlined so hashing a feature does not allocate; the
// feature of unigram t is "u\x00"+t, of bigram (s, t) "b\x00"+s+"\x00"+t.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func normalize64(v []float64) []float32 {
	n := 0.0
	for _, x := range v {
		n += x * x
	}
	out := make([]float32, len(v))
	if n == 0 {
		return out // no features: the zero vector, cosine 0 with everything
	}
	n = math.Sqrt(n)
	for i, x := range v {
		out[i] = float32(x / n)
	}
	return out
}

// Normalize returns v scaled to unit L2 norm (the zero vector unchanged).
func Normalize(v []float32) []float32 {
	w := make([]float64, len(v))
	for i, x := range v {
		w[i] = float64(x)
	}
	return normalize64(w)
}

// Cosine is the cosine similarity of two vectors (0 if either is zero).
func Cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

// Ollama calls Ollama's /api/embed in batches and keeps an on-disk
// cache keyed by the model's digest and the text's hash, so a knowledge base
// is embedded once across runs, and a model re-created under the same name
// never serves the old model's vectors. Before the first vector it checks
// that the server's model is an embedding model. Vectors are L2-normalized.
type Ollama struct {
	client   *ollama.Client
	model    string
	batch    int
	cacheDir string // "" disables the cache
	threads  int    // the server's num_thread for these requests; 0 = its default

	mu     sync.Mutex
	dim    int
	digest string // the server's model digest, once checked (see ready)
	// wp and maxPieces truncate texts as sentence-transformers does, for a
	// BERT model (wordpiece.go); nil for other models.
	wp        *wordPiece
	maxPieces int

	// memo keeps the vectors of this process's texts (queries, memories,
	// re-ranked chunks), so a text embedded ahead in a batch (Prefetch) or
	// earlier in the run costs nothing the next time.
	memo VecMemo
}

// memoMax bounds the Ollama embedder's in-memory vectors (at 384
// dimensions, 1.5 KiB each: about 48 MiB when full).
const memoMax = 1 << 15

// VecMemo is a bounded map from text to vector, safe for concurrent use;
// when Max entries are held it starts over (re-embedding is only a cost,
// never a different vector: the disk caches keep them).
type VecMemo struct {
	Max int
	mu  sync.Mutex
	m   map[string][]float32
}

// Get returns the vector kept for k.
func (c *VecMemo) Get(k string) ([]float32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

// Put keeps v for k.
func (c *VecMemo) Put(k string, v []float32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= c.Max {
		c.m = make(map[string][]float32)
	}
	c.m[k] = v
}

// NewOllama embeds with model on the Ollama server at host
// ("host:port" or a URL; "" = OLLAMA_HOST); calls have the timeout and
// retries of ollama.DefaultPolicy.
func NewOllama(host, model string, batch int, cacheDir string) (*Ollama, error) {
	if model == "" {
		return nil, errors.New("ollama embedder: model is empty")
	}
	if batch < 1 {
		return nil, fmt.Errorf("ollama embedder: batch must be ≥ 1, got %d", batch)
	}
	var hosts []string
	if host != "" {
		hosts = []string{host}
	}
	// A batch is CPU-bound work on the server (seconds per passage for a
	// BERT on a loaded 2-core machine, and requests queue: Ollama runs an
	// embedding model one sequence at a time), so a call may take minutes;
	// a dead server is still refused at once.
	pol := ollama.DefaultPolicy
	pol.Timeout = 15 * time.Minute
	client, err := ollama.New(hosts, 4, nil, pol, 1)
	if err != nil {
		return nil, fmt.Errorf("ollama embedder: %w", err)
	}
	return &Ollama{client: client, model: model, batch: batch, cacheDir: cacheDir, memo: VecMemo{Max: memoMax}}, nil
}

// SetThreads sets the server's num_thread for this embedder's requests (0 =
// the server's default, one per physical core). ggml's threads wait for
// each other at every layer, so on a machine already busy one thread is
// faster than two (8 passages at load 5: 0.7 s with 1, 2.8–7.3 s with 2).
// Each output value is computed by one thread, so the vectors do not
// depend on it.
func (o *Ollama) SetThreads(n int) error {
	if n < 0 {
		return fmt.Errorf("ollama embedder: threads must be ≥ 0, got %d", n)
	}
	o.threads = n
	return nil
}

// Dim implements Embedder; 0 until a vector has been seen.
func (o *Ollama) Dim() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dim
}

// Name implements Embedder.
func (o *Ollama) Name() string { return "ollama:" + o.model }

// ready checks once (until it succeeds) that the server has the model and
// that it is an embedding model, and returns its digest.
func (o *Ollama) ready(ctx context.Context) (string, error) {
	o.mu.Lock()
	d := o.digest
	o.mu.Unlock()
	if d != "" {
		return d, nil
	}
	show, err := o.client.Show(ctx, o.model, true)
	if err != nil {
		return "", fmt.Errorf("ollama embedder: %w", err)
	}
	if err := checkEmbeddingModel(o.model, show); err != nil {
		return "", err
	}
	wp, maxPieces := bertTruncation(show)
	d, err = o.client.Check(ctx, o.model)
	if err != nil {
		return "", fmt.Errorf("ollama embedder: %w", err)
	}
	o.mu.Lock()
	o.digest, o.wp, o.maxPieces = d, wp, maxPieces
	o.mu.Unlock()
	return d, nil
}

// bertTruncation returns the WordPiece counter and the word pieces a text
// may have (num_ctx less [CLS] and [SEP]) for a BERT model whose num_ctx is
// set (himes embed create sets it to max_seq_length); nil for any other
// model, whose texts Ollama truncates its own way.
func bertTruncation(show *api.ShowResponse) (*wordPiece, int) {
	if arch, _ := show.ModelInfo["general.architecture"].(string); arch != "bert" {
		return nil, 0
	}
	if tm, _ := show.ModelInfo["tokenizer.ggml.model"].(string); tm != "bert" {
		return nil, 0
	}
	numCtx := 0
	for _, line := range strings.Split(show.Parameters, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "num_ctx" {
			numCtx, _ = strconv.Atoi(f[1])
		}
	}
	raw, _ := show.ModelInfo["tokenizer.ggml.tokens"].([]any)
	if numCtx < 3 || len(raw) == 0 {
		return nil, 0
	}
	tokens := make([]string, 0, len(raw))
	for _, t := range raw {
		s, _ := t.(string)
		tokens = append(tokens, s)
	}
	return newWordPieceFromGGUF(tokens), numCtx - 2
}

// Fingerprint names the exact model: its name and the server's digest of
// it (what a cache of its vectors must be keyed by).
func (o *Ollama) Fingerprint(ctx context.Context) (string, error) {
	d, err := o.ready(ctx)
	if err != nil {
		return "", err
	}
	return o.Name() + "@" + d, nil
}

func (o *Ollama) cachePath(digest, text string) string {
	h := sha256.Sum256([]byte(o.model + "\x00" + digest + "\x00" + text))
	k := hex.EncodeToString(h[:])
	return filepath.Join(o.cacheDir, k[:2], k+".f32")
}

// Embed implements Embedder: texts this embedder has seen are served from
// memory, cached texts are read from disk, and the rest, each distinct text
// once, are sent in batches of o.batch.
func (o *Ollama) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	digest, err := o.ready(ctx)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(texts))
	var missing []int         // first index of each distinct text to embed
	dup := map[string][]int{} // text → its later indexes, filled once it is embedded
	for i, t := range texts {
		if v, ok := o.memo.Get(t); ok {
			out[i] = v
			continue
		}
		if o.cacheDir != "" {
			v, err := readVec(o.cachePath(digest, t))
			if err == nil {
				if err := o.checkDim(len(v)); err != nil {
					return nil, fmt.Errorf("ollama embed cache %s: %w", o.cachePath(digest, t), err)
				}
				out[i] = v
				o.memo.Put(t, v)
				continue
			}
			if !errors.Is(err, fs.ErrNotExist) {
				slog.Warn("ollama embed cache entry unreadable; re-embedding", "path", o.cachePath(digest, t), "err", err)
			}
		}
		if later, ok := dup[t]; ok {
			dup[t] = append(later, i)
			continue
		}
		dup[t] = nil
		missing = append(missing, i)
	}
	for start := 0; start < len(missing); start += o.batch {
		idx := missing[start:min(start+o.batch, len(missing))]
		in := make([]string, len(idx))
		for j, i := range idx {
			in[j] = texts[i]
			if o.wp != nil {
				in[j], _ = o.wp.prepare(in[j], o.maxPieces)
			}
		}
		req := api.EmbedRequest{Model: o.model, Input: in}
		if o.threads > 0 {
			req.Options = map[string]any{"num_thread": o.threads}
		}
		vecs, err := o.client.Embed(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("ollama embed (model %s, %d texts): %w", o.model, len(in), err)
		}
		if len(vecs) != len(in) {
			return nil, fmt.Errorf("ollama embed (model %s): %d vectors for %d texts", o.model, len(vecs), len(in))
		}
		for j, i := range idx {
			v := Normalize(vecs[j])
			if err := o.checkDim(len(v)); err != nil {
				return nil, fmt.Errorf("ollama embed (model %s): %w", o.model, err)
			}
			out[i] = v
			for _, k := range dup[texts[i]] {
				out[k] = v
			}
			o.memo.Put(texts[i], v)
			if o.cacheDir != "" {
				if err := writeVec(o.cachePath(digest, texts[i]), v); err != nil {
					return nil, fmt.Errorf("ollama embed cache: %w", err)
				}
			}
		}
	}
	return out, nil
}

// Prefetch embeds texts ahead (each distinct text once, in batches of
// o.batch), so that later calls for any of them, one text at a time, are
// answered from memory: what an evaluation or a training step does with
// the queries of all its turns before retrieving for each.
func (o *Ollama) Prefetch(ctx context.Context, texts []string) error {
	_, err := o.Embed(ctx, texts)
	return err
}

// Prefetcher is an embedder that keeps what it embedded in memory, so that
// embedding many texts ahead in batches makes later calls for them free.
type Prefetcher interface {
	Prefetch(ctx context.Context, texts []string) error
}

var _ Prefetcher = (*Ollama)(nil)

func (o *Ollama) checkDim(n int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fixDim(&o.dim, n)
}

// fixDim checks a vector's length n against *dim, the length of the
// embedder's earlier vectors, which the first one sets (the caller holds
// the lock that guards *dim).
func fixDim(dim *int, n int) error {
	if n == 0 {
		return errors.New("empty vector")
	}
	if *dim == 0 {
		*dim = n
	}
	if n != *dim {
		return fmt.Errorf("vector of dimension %d, earlier ones had %d", n, *dim)
	}
	return nil
}

func readVec(path string) ([]float32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b)%4 != 0 || len(b) == 0 {
		return nil, fmt.Errorf("%s: bad size %d", path, len(b))
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	if i := NonFinite(v); i >= 0 {
		return nil, fmt.Errorf("%s: value %d of %d is %v", path, i, len(v), v[i])
	}
	return v, nil
}

// NonFinite is the index of v's first NaN or infinite value, -1 if none.
// Caches refuse such a vector (a damaged file; JSON, which the servers
// answer in, has neither): every cosine with it would be NaN, and a NaN
// score sorts as a tie with everything, so rankings would change without a
// word.
func NonFinite(v []float32) int {
	for i, x := range v {
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			return i
		}
	}
	return -1
}

// writeVec writes atomically (internal/atomicfile) so concurrent runs
// sharing a cache never read a half-written vector.
func writeVec(path string, v []float32) error {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return atomicfile.WriteFile(path, b, 0o644)
}
