package retrieval

// The on-disk cache of a knowledge base's dense vectors, for embedders that
// can name their exact model (the Ollama embedder: name and digest), whose
// vectors cost minutes to hours on a CPU. One file per (model, texts): the
// file name is a SHA-256 over the model's fingerprint and every text, and
// its header repeats the model, the row count and the dimension, which a
// load checks; a mismatch is an error naming the file, never a silent
// re-use. Written whole or not at all (internal/atomicfile).

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/internal/atomicfile"
)

// Fingerprinter is an embedder that names its exact model (e.g.
// "ollama:all-minilm-l6-v2@<digest>"): its dense indexes are cached on disk.
type Fingerprinter interface {
	Fingerprint(ctx context.Context) (string, error)
}

const denseMagic = "HIMESDV1"

// denseCacheKey is the SHA-256 of the model fingerprint and the texts.
func denseCacheKey(model string, texts []string) string {
	h := sha256.New()
	var n [8]byte
	write := func(s string) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		io.WriteString(h, s)
	}
	write(denseMagic)
	write(model)
	for _, t := range texts {
		write(t)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// DenseCachePath is where the dense index of texts under model is cached in dir.
func DenseCachePath(dir, model string, texts []string) string {
	return filepath.Join(dir, "dense", denseCacheKey(model, texts)+".vec")
}

// EmbedDocsCached is EmbedDocs with the on-disk cache under dir when e is a
// Fingerprinter (dir "" or another embedder: EmbedDocs). progress, when
// set, is told the texts embedded so far.
func EmbedDocsCached(ctx context.Context, e embedding.Embedder, texts []string, batch int, dir string, progress func(done, total int)) (*DenseIndex, error) {
	fe, ok := e.(Fingerprinter)
	if !ok || dir == "" {
		return embedDocs(ctx, e, texts, batch, progress)
	}
	model, err := fe.Fingerprint(ctx)
	if err != nil {
		return nil, err
	}
	path := DenseCachePath(dir, model, texts)
	d, err := readDenseCache(path, model, len(texts))
	switch {
	case err == nil:
		// The model answers with vectors of the cached dimension and the
		// first text's vector: a changed model or a damaged file is an error.
		probe, err := embedding.EmbedAs(ctx, e, embedding.RolePassage, texts[:1])
		if err != nil {
			return nil, fmt.Errorf("check dense cache %s: %w", path, err)
		}
		if len(probe[0]) != d.dim {
			return nil, fmt.Errorf("dense cache %s holds %d-dimensional vectors of %s, the model now returns %d: remove the file to embed the knowledge base again",
				path, d.dim, model, len(probe[0]))
		}
		if c := embedding.Cosine(probe[0], d.Vector(0)); c < 0.999 {
			return nil, fmt.Errorf("dense cache %s: the model's vector of the first text has cosine %.4f with the cached one: remove the file to embed the knowledge base again", path, c)
		}
		// Named by the embedder, as a freshly embedded index is: memory's
		// re-rank reuses the matrix only when the names match.
		d.name = e.Name()
		slog.Info("retrieval: dense vectors from cache", "file", path, "rows", d.rows, "dim", d.dim)
		if progress != nil {
			progress(len(texts), len(texts))
		}
		return d, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	start := time.Now()
	d, err = embedDocs(ctx, e, texts, batch, progress)
	if err != nil {
		return nil, err
	}
	if err := writeDenseCache(path, model, d); err != nil {
		return nil, err
	}
	slog.Info("retrieval: dense vectors cached", "file", path, "rows", d.rows, "dim", d.dim, "elapsed_s", time.Since(start).Seconds())
	return d, nil
}

// header: magic, model length + model, rows (uint64), dim (uint32); then
// rows × dim little-endian float32.
func writeDenseCache(path, model string, d *DenseIndex) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("dense cache: %w", err)
	}
	return atomicfile.Write(path, 0o644, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		bw.WriteString(denseMagic)
		var b [8]byte
		binary.LittleEndian.PutUint32(b[:4], uint32(len(model)))
		bw.Write(b[:4])
		bw.WriteString(model)
		binary.LittleEndian.PutUint64(b[:], uint64(d.rows))
		bw.Write(b[:])
		binary.LittleEndian.PutUint32(b[:4], uint32(d.dim))
		bw.Write(b[:4])
		for _, x := range d.data {
			binary.LittleEndian.PutUint32(b[:4], math.Float32bits(x))
			bw.Write(b[:4])
		}
		return bw.Flush()
	})
}

func readDenseCache(path, model string, rows int) (*DenseIndex, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	bad := func(what string, args ...any) error {
		return fmt.Errorf("dense cache %s: %s: remove the file to embed the knowledge base again", path, fmt.Sprintf(what, args...))
	}
	head := make([]byte, len(denseMagic)+4)
	if _, err := io.ReadFull(br, head); err != nil || string(head[:len(denseMagic)]) != denseMagic {
		return nil, bad("not a himes dense cache file")
	}
	ml := binary.LittleEndian.Uint32(head[len(denseMagic):])
	if ml > 4096 {
		return nil, bad("model name of %d bytes", ml)
	}
	mb := make([]byte, ml+12)
	if _, err := io.ReadFull(br, mb); err != nil {
		return nil, bad("truncated header")
	}
	if got := string(mb[:ml]); got != model {
		return nil, bad("vectors of %s, want %s", got, model)
	}
	n := binary.LittleEndian.Uint64(mb[ml:])
	dim := int(binary.LittleEndian.Uint32(mb[ml+8:]))
	if n != uint64(rows) || dim < 1 {
		return nil, bad("%d rows of dimension %d, the knowledge base has %d texts", n, dim, rows)
	}
	data := make([]float32, rows*dim)
	buf := make([]byte, 4*dim)
	for r := range rows {
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, bad("truncated at row %d of %d", r, rows)
		}
		row := data[r*dim : (r+1)*dim]
		for j := range row {
			row[j] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*j:]))
		}
		if j := embedding.NonFinite(row); j >= 0 {
			return nil, bad("row %d, value %d is %v", r, j, row[j])
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, bad("data after the %d rows", rows)
	}
	return &DenseIndex{dim: dim, rows: rows, data: data, name: model}, nil
}
