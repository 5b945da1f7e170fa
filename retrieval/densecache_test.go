package retrieval

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/himes-rl/himes/embedding"
)

// fpEmbedder is the hashing embedder under a fixed model fingerprint,
// counting the texts it embeds.
type fpEmbedder struct {
	*embedding.Hash
	fp    string
	texts atomic.Int64
}

func (e *fpEmbedder) Fingerprint(context.Context) (string, error) { return e.fp, nil }

func (e *fpEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.texts.Add(int64(len(texts)))
	return e.Hash.Embed(ctx, texts)
}

func newFP(t *testing.T, dim int, fp string) *fpEmbedder {
	h, err := embedding.NewHash(dim)
	if err != nil {
		t.Fatal(err)
	}
	return &fpEmbedder{Hash: h, fp: fp}
}

func TestEmbedDocsCached(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	texts := []string{"the eiffel tower", "who wrote dune", "green tea caffeine", "a fourth text"}
	e := newFP(t, 16, "ollama:m@d1")
	var last [2]int
	progress := func(done, total int) { last = [2]int{done, total} }
	d1, err := EmbedDocsCached(ctx, e, texts, 3, dir, progress)
	if err != nil {
		t.Fatal(err)
	}
	if e.texts.Load() != 4 || last != [2]int{4, 4} {
		t.Fatalf("first build embedded %d texts, progress %v; want 4 and [4 4]", e.texts.Load(), last)
	}
	path := DenseCachePath(dir, "ollama:m@d1", texts)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no cache file: %v", err)
	}
	// A new embedder of the same model reads the file: one probe text only.
	e2 := newFP(t, 16, "ollama:m@d1")
	d2, err := EmbedDocsCached(ctx, e2, texts, 3, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e2.texts.Load() != 1 {
		t.Fatalf("cached build embedded %d texts, want the 1 probe", e2.texts.Load())
	}
	if d2.Dim() != 16 || !slices.Equal(d1.data, d2.data) {
		t.Fatal("cached vectors differ from the built ones")
	}
	// Named like the built index (the embedder's name, not the file's
	// fingerprint), so memory's re-rank recognizes its space and reuses it.
	if d1.name != e.Name() || d2.name != d1.name {
		t.Fatalf("index names: built %q, cached %q; want the embedder's %q", d1.name, d2.name, e.Name())
	}
	// Other texts or another model digest: another file, embedded afresh.
	if DenseCachePath(dir, "ollama:m@d1", texts[:3]) == path || DenseCachePath(dir, "ollama:m@d2", texts) == path {
		t.Fatal("the cache key ignores the texts or the model")
	}

	// The same model now returning vectors of another dimension: an error
	// naming the file and both dimensions, the file untouched, nothing added.
	before, _ := os.ReadFile(path)
	e3 := newFP(t, 8, "ollama:m@d1")
	_, err = EmbedDocsCached(ctx, e3, texts, 3, dir, nil)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "16-dimensional") || !strings.Contains(err.Error(), "returns 8") {
		t.Fatalf("dimension change: %v; want an error naming %s, 16 and 8", err, path)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("the cache file changed on a refused load")
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("%d files in the cache dir after a refused load, want 1", len(ents))
	}

	// A damaged file is an error naming it, not a silent rebuild or a short index.
	if err := os.WriteFile(path, before[:len(before)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := EmbedDocsCached(ctx, newFP(t, 16, "ollama:m@d1"), texts, 3, dir, nil); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated cache: %v", err)
	}
	// So is a NaN in it (row 2, value 5: past the first row, which the probe
	// compares, so only the read can see it), named by row and value.
	nan := bytes.Clone(before)
	off := len(nan) - 4*16*len(texts) + 4*(2*16+5)
	binary.LittleEndian.PutUint32(nan[off:], math.Float32bits(float32(math.NaN())))
	if err := os.WriteFile(path, nan, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := EmbedDocsCached(ctx, newFP(t, 16, "ollama:m@d1"), texts, 3, dir, nil); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "row 2, value 5 is NaN") {
		t.Fatalf("NaN in the cache: %v", err)
	}
}
